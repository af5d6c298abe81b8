package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/eventstore/storetest"
	"github.com/escrowd/escrowd/internal/pgtest"
)

// TestEventsExportOfDataAsWritten: the store keeps event data byte for
// byte as the writer sent it (json, migration 0007), so the export meets
// whatever spacing and line breaks a writer used. Each event still takes
// exactly one line, and data without redaction rules is the stored text
// with only the whitespace between tokens removed: key order, number forms
// and escapes are the writer's.
func TestEventsExportOfDataAsWritten(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewURL(t)
	merchantID := cliMerchant(t, db, "Acme")
	env := testEnv(t, db)
	meta := fmt.Appendf(nil, "{\n  \"merchantId\": %q\n}\n", merchantID)
	plain := "{\n  \"z\": 1,\n  \"a\": [1.50, 2E+1, \"é\\u00e9\"],\n  \"s\": \"line\\nbreak\"\n}\n"
	keyIssued := "{\n  \"id\": \"k9\",\n  \"digest\": \"deadbeef\",\n  \"hint\": \"sk_test_…abcd\"\n}"
	plainEv := eventstore.EventData{ID: uuid.New(), Type: "test.pretty", Data: []byte(plain), Metadata: meta}
	keyEv := eventstore.EventData{ID: uuid.New(), Type: "merchant.key_issued", Data: []byte(keyIssued), Metadata: meta}
	res, err := env.Store.Append(ctx, eventstore.StreamAppend{Stream: "pretty-" + uuid.NewString()[:8], Expected: eventstore.NoStream,
		Events: []eventstore.EventData{plainEv, keyEv}})
	if err != nil {
		t.Fatal(err)
	}
	storetest.WaitReadable(t, env.Store, res.Position)

	out, err := cli(t, db, "events", "export", "--merchant", merchantID)
	if err != nil {
		t.Fatal(err)
	}
	lines := exported(t, out) // one JSON object a line, the export's fields only
	var compact bytes.Buffer
	if err := json.Compact(&compact, []byte(plain)); err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, l := range lines {
		switch l.Type {
		case plainEv.Type:
			seen++
			if string(l.Data) != compact.String() {
				t.Errorf("exported data %s; want the stored text compacted, %s", l.Data, compact.String())
			}
		case keyEv.Type:
			if !strings.Contains(string(l.Data), `"k9"`) {
				continue // the merchant's own keys
			}
			seen++
			if strings.Contains(string(l.Data), "deadbeef") || !jsonEqual(l.Data, []byte(`{"id":"k9","digest":"[redacted]","hint":"sk_test_…abcd"}`)) {
				t.Errorf("exported key_issued data %s", l.Data)
			}
		}
	}
	if seen != 2 {
		t.Fatalf("exported %d of the 2 appended events:\n%s", seen, out)
	}
}
