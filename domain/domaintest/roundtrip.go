// Package domaintest holds checks every aggregate's tests share.
package domaintest

import (
	"encoding/json"
	"reflect"
	"sort"
	"testing"

	"github.com/escrowd/escrowd/domain"
)

// RoundTrip checks that every event survives the store: it marshals, the
// registry decodes it back to an equal value, and the events given cover
// every type the registry knows (a new event type must be added to the
// test). An unknown type must not decode. It returns the decoded events.
func RoundTrip(t testing.TB, reg domain.Registry, events ...domain.Event) []domain.Event {
	t.Helper()
	seen := map[string]bool{}
	var out []domain.Event
	for _, ev := range events {
		data, err := json.Marshal(ev)
		if err != nil {
			t.Fatalf("%s: %v", ev.EventType(), err)
		}
		back, err := reg.Decode(ev.EventType(), data)
		if err != nil {
			t.Fatalf("%s: %v", ev.EventType(), err)
		}
		if !reflect.DeepEqual(back, ev) {
			t.Fatalf("%s round trip\n got  %+v\n want %+v\n json %s", ev.EventType(), back, ev, data)
		}
		seen[ev.EventType()] = true
		out = append(out, back)
	}
	var missing []string
	for typ := range reg {
		if !seen[typ] {
			missing = append(missing, typ)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Fatalf("event types not round-tripped: %v", missing)
	}
	if _, err := reg.Decode("no.such_event", []byte(`{}`)); err == nil {
		t.Fatal("an unknown event type decoded")
	}
	return out
}
