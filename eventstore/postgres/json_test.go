package postgres_test

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/escrowd/escrowd/eventstore"
)

// TestAppendRefusesWhatJSONBRefused: the store refuses the data and
// metadata jsonb refuses (invalid JSON, invalid UTF-8, the escape \u0000,
// unpaired surrogate escapes), and accepts what jsonb accepts, whatever
// the columns' type. Each case is checked against jsonb itself, and appended
// together with a valid event of another stream: a refusal stores neither.
func TestAppendRefusesWhatJSONBRefused(t *testing.T) {
	s, pool := newStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	cases := []struct {
		name, json string
		refused    bool
	}{
		{"not JSON", `{bad`, true},
		{"truncated", `{"a":`, true},
		{"two values", `{} {}`, true},
		{"empty", ``, true}, // as metadata; empty data is stored as null
		{"trailing backslash", `"a\`, true},
		{"short escape", `"\u00"`, true},
		{"invalid UTF-8", "\"\xff\"", true},
		{"NUL escape", `{"name":"Ada\u0000"}`, true},
		{"NUL escape in a key", `{"a\u0000":1}`, true},
		{"lone high surrogate", `"\ud800"`, true},
		{"lone high surrogate, upper case", `"x\uD83Dy"`, true},
		{"high surrogate, then another escape", `"\ud83d\n"`, true},
		{"two high surrogates", `"\ud83d\ud83d"`, true},
		{"lone low surrogate", `"\ude00"`, true},
		{"reversed pair", `"\ude00\ud83d"`, true},

		{"escaped backslash before u0000", `{"path":"C:\\u0000"}`, false},
		{"surrogate pair", `"\ud83d\ude00"`, false},
		{"surrogate pair, upper case", `"\uD83D\uDE00 and \u00E9"`, false},
		{"control escape", `"\u0001\u001f"`, false},
		{"escaped quote and slash", `"\"\/\\"`, false},
		{"ends with an escaped backslash", `["a\\"]`, false},
		{"null", `null`, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// What jsonb does with it (as a parameter, so no SQL quoting).
			jsonbErr := pool.QueryRow(ctx, `SELECT $1::text::jsonb::text`, c.json).Scan(new(string))
			if (jsonbErr != nil) != c.refused {
				t.Fatalf("jsonb refused: %v; the case says %v", jsonbErr, c.refused)
			}
			for _, field := range []string{"data", "metadata"} {
				if field == "data" && c.json == "" {
					continue
				}
				ok := eventstore.EventData{ID: uuid.New(), Type: "Ok", Data: []byte(`{}`)}
				e := eventstore.EventData{ID: uuid.New(), Type: "Case", Data: []byte(`{}`)}
				if field == "data" {
					e.Data = []byte(c.json)
				} else {
					e.Metadata = []byte(c.json)
				}
				p := "esc-" + uuid.NewString()[:8]
				_, err := s.Append(ctx,
					eventstore.StreamAppend{Stream: p + "-ok", Expected: eventstore.Any, Events: []eventstore.EventData{ok}},
					eventstore.StreamAppend{Stream: p + "-case", Expected: eventstore.NoStream, Events: []eventstore.EventData{e}})
				if (err != nil) != c.refused {
					t.Fatalf("%s %q: append error %v; want refused %v", field, c.json, err, c.refused)
				}
				okBack, rerr := s.ReadStream(ctx, p+"-ok", 0, 0)
				if rerr != nil {
					t.Fatal(rerr)
				}
				caseBack, rerr := s.ReadStream(ctx, p+"-case", 0, 0)
				if rerr != nil {
					t.Fatal(rerr)
				}
				if c.refused {
					if len(okBack)+len(caseBack) != 0 {
						t.Fatalf("%s %q: refused append stored %d+%d events", field, c.json, len(okBack), len(caseBack))
					}
					continue
				}
				if len(okBack) != 1 || len(caseBack) != 1 {
					t.Fatalf("%s %q: stored %d+%d events, want 1+1", field, c.json, len(okBack), len(caseBack))
				}
				got := caseBack[0].Data
				if field == "metadata" {
					got = caseBack[0].Metadata
				}
				var want, have any
				if err := json.Unmarshal([]byte(c.json), &want); err != nil {
					t.Fatal(err)
				}
				if err := json.Unmarshal(got, &have); err != nil || !reflect.DeepEqual(have, want) {
					t.Fatalf("%s %q read back as %q (%v)", field, c.json, got, err)
				}
			}
		})
	}
}
