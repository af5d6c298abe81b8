package projections

import (
	"regexp"
	"strings"
	"testing"
)

// A fixed kept table counts only its new rows (keptTable.changeSQL), which
// is right only while no statement of its projector changes a column its
// keys and positions come from: one that did would leave the counts behind.
func TestFixedTablesNeverUpdateTheirKeys(t *testing.T) {
	for _, tc := range []struct {
		kept   keptTable
		writes []string // every statement the projector writes the table with
		keyed  []string // the columns listing_keys and pos are made of
	}{
		{transactionsKept, []string{transactionUpsertSQL}, []string{"merchant_id", "environment", "customer_id", "transaction_type", "pos"}},
		{customersKept, []string{customerInsertSQL, customerProfileSQL, customerPermissionsSQL, customerBlockSQL, customerUnblockSQL},
			[]string{"merchant_id", "environment", "pos"}},
	} {
		if !tc.kept.fixed {
			t.Fatalf("%s is not fixed", tc.kept.table)
		}
		for _, w := range tc.writes {
			for _, col := range assigned(t, w) {
				for _, k := range tc.keyed {
					if col == k {
						t.Errorf("%s: %q sets %s, which its keys come from: the table cannot be fixed", tc.kept.table, w, k)
					}
				}
			}
		}
	}
}

var setClause = regexp.MustCompile(`(?s)(?:DO UPDATE SET|^UPDATE \w+ SET)(.*?)(?:\sWHERE\s|$)`)

// assigned are the columns an insert's conflict clause or an update sets.
func assigned(t *testing.T, stmt string) []string {
	stmt = strings.TrimSpace(stmt)
	m := setClause.FindStringSubmatch(stmt)
	if m == nil {
		if strings.HasPrefix(stmt, "INSERT") && strings.HasSuffix(stmt, "DO NOTHING") {
			return nil
		}
		t.Fatalf("neither an update nor an insert that changes nothing on conflict: %s", stmt)
	}
	var cols []string
	for _, assignment := range strings.Split(m[1], ",") {
		if col, _, ok := strings.Cut(assignment, "="); ok {
			cols = append(cols, strings.TrimSpace(col))
		}
	}
	return cols
}
