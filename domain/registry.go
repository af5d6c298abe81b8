package domain

import (
	"encoding/json"
	"fmt"
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

// Decode turns a stored event back into its Go value (dereferenced).
func (r Registry) Decode(typ string, data []byte) (Event, error) {
	c, ok := r[typ]
	if !ok {
		return nil, fmt.Errorf("domain: unknown event type %q", typ)
	}
	ev := c()
	if err := json.Unmarshal(data, ev); err != nil {
		return nil, fmt.Errorf("domain: decode %s: %w", typ, err)
	}
	return ev, nil
}
