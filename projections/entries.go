package projections

import (
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
}

// DecodeEntry returns the ledger entry a recorded event is, if it is one.
func DecodeEntry(re eventstore.RecordedEvent) (ledger.Entry, bool, error) {
	prefix, _, _ := strings.Cut(re.Stream, "-")
	reg, ok := entryRegistries[prefix]
	if !ok {
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
