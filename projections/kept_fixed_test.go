package projections

import (
	"strings"
	"testing"
)

// A fixed kept table counts only its new rows (keptTable.changeSQL), which
// is right only while its upsert changes none of the columns its keys and
// positions come from: an upsert that did would leave the counts behind.
func TestFixedTablesNeverUpdateTheirKeys(t *testing.T) {
	for _, tc := range []struct {
		kept   keptTable
		upsert string
		keyed  []string // the columns listing_keys and pos are made of
	}{
		{transactionsKept, transactionUpsertSQL, []string{"merchant_id", "environment", "customer_id", "transaction_type", "pos"}},
	} {
		if !tc.kept.fixed {
			t.Fatalf("%s is not fixed", tc.kept.table)
		}
		_, set, ok := strings.Cut(tc.upsert, "DO UPDATE SET")
		if !ok {
			t.Fatalf("%s: no DO UPDATE SET in its upsert", tc.kept.table)
		}
		for _, assignment := range strings.Split(set, ",") {
			col, _, _ := strings.Cut(strings.TrimSpace(assignment), "=")
			for _, k := range tc.keyed {
				if strings.TrimSpace(col) == k {
					t.Errorf("%s's upsert sets %s, which its keys come from: the table cannot be fixed", tc.kept.table, k)
				}
			}
		}
	}
}
