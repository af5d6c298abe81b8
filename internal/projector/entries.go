package projector

import (
	"reflect"
	"sort"
	"strings"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/escrow"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/payment"
	"github.com/escrowd/escrowd/eventstore"
)

// entryRegistries are the aggregates whose events move money or write
// transaction records (ledger.Entry), by stream prefix. An aggregate that
// moves money is added here and every reader of money (the ledger read
// model, the audit, the webhook subscriber) follows.
var entryRegistries = map[string]domain.Registry{
	"payment": payment.Registry,
	"escrow":  escrow.Registry,
	// A provider charge credited as a deposit of its own.
	"charge": payment.ChargeRegistry,
}

// nonEntryTypes are the event types of entryRegistries that are not
// ledger entries (an escrow's creation, its funding), by stream prefix:
// DecodeEntry need not decode them to find that out. Decoding JSON is most
// of the ledger projector's own CPU, and escrow.created, the largest
// event, is one of these.
var nonEntryTypes = func() map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for prefix, reg := range entryRegistries {
		out[prefix] = map[string]bool{}
		for typ, zero := range reg {
			if _, ok := reflect.ValueOf(zero()).Elem().Interface().(ledger.Entry); !ok {
				out[prefix][typ] = true
			}
		}
	}
	return out
}()

// DecodeEntry returns the ledger entry a recorded event is, if it is one.
func DecodeEntry(re eventstore.RecordedEvent) (ledger.Entry, bool, error) {
	prefix, _, _ := strings.Cut(re.Stream, "-")
	reg, ok := entryRegistries[prefix]
	if !ok || nonEntryTypes[prefix][re.Type] {
		return nil, false, nil
	}
	ev, err := reg.Decode(re.Type, re.Data)
	if err != nil {
		return nil, false, err
	}
	e, ok := ev.(ledger.Entry)
	return e, ok, nil
}

// EntryStreamPrefixes are the stream prefixes ("payment-", ...) whose
// events may be ledger entries.
func EntryStreamPrefixes() []string {
	out := make([]string, 0, len(entryRegistries))
	for prefix := range entryRegistries {
		out = append(out, prefix+"-")
	}
	sort.Strings(out)
	return out
}
