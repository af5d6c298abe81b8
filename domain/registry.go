package domain

import (
	"fmt"
	"reflect"

	json "github.com/go-json-experiment/json/v1"
)

// Registry decodes the stored events of one aggregate kind. Each aggregate
// package owns one (no process-wide registry).
type Registry map[string]func() Event

// NewRegistry builds a registry from zero values of the event types; each
// constructor returns a pointer so json can fill it.
func NewRegistry(ctors ...func() Event) Registry {
	r := Registry{}
	for _, c := range ctors {
		r[c().EventType()] = c
	}
	return r
}

// Unmarshal decodes JSON the domain wrote (events, folded states). It is
// encoding/json's Unmarshal, API and behaviour, on the json/v2 engine
// (github.com/go-json-experiment/json/v1, the mirror of the standard
// library's encoding/json/v2 work): about twice as fast on events, which
// every projector and the webhook subscriber decode (BenchmarkEventCodec).
func Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }

// Decode turns a stored event back into its Go value. It returns the value,
// not the pointer json filled, so an event read back has the same shape as
// one just decided and Apply functions and projectors switch on values only.
func (r Registry) Decode(typ string, data []byte) (Event, error) {
	c, ok := r[typ]
	if !ok {
		return nil, fmt.Errorf("domain: unknown event type %q", typ)
	}
	ptr := c()
	if err := Unmarshal(data, ptr); err != nil {
		return nil, fmt.Errorf("domain: decode %s: %w", typ, err)
	}
	return reflect.ValueOf(ptr).Elem().Interface().(Event), nil
}
