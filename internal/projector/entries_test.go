package projector

import (
	"reflect"
	"testing"

	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/eventstore"
)

// DecodeEntry skips the event types that are not ledger entries without
// decoding them (their data is not even looked at), and still decodes, and
// refuses bad data of, every type that is one.
func TestDecodeEntrySkipsOnlyNonEntryTypes(t *testing.T) {
	entries, others := 0, 0
	for prefix, reg := range entryRegistries {
		for typ, zero := range reg {
			_, isEntry := reflect.ValueOf(zero()).Elem().Interface().(ledger.Entry)
			re := eventstore.RecordedEvent{Stream: prefix + "-x", Type: typ, Data: []byte(`not json`)}
			_, ok, err := DecodeEntry(re)
			if isEntry {
				entries++
				if err == nil {
					t.Errorf("%s with bad data: no error, so it was not decoded", typ)
				}
				continue
			}
			others++
			if ok || err != nil {
				t.Errorf("%s (not an entry): ok %v, err %v; want skipped undecoded", typ, ok, err)
			}
		}
	}
	if entries == 0 || others == 0 {
		t.Fatalf("%d entry types, %d others: the registries changed shape", entries, others)
	}
	// A type no registry knows (a newer release's, or a corrupt row) is
	// refused, not skipped as a non-entry: it may move money, and a ledger
	// that skipped it would show balances without it.
	for prefix := range entryRegistries {
		re := eventstore.RecordedEvent{Stream: prefix + "-x", Type: prefix + ".unheard_of", Data: []byte(`{}`)}
		if _, ok, err := DecodeEntry(re); err == nil {
			t.Errorf("%s: ok %v, no error; want an unknown type refused", re.Type, ok)
		}
	}
	// An entry type decodes to its entry.
	_, ok, err := DecodeEntry(eventstore.RecordedEvent{Stream: "escrow-x", Type: "escrow.released", Data: []byte(`{}`)})
	if err != nil || !ok {
		t.Fatalf("escrow.released: ok %v, err %v", ok, err)
	}
}
