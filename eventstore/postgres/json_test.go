package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/eventstore/storetest"
)

// TestDataIsReadBackByteForByte: event data and metadata are stored as
// json (migration 0007), so a reader gets exactly the bytes the writer
// sent: key order, spacing, duplicate keys, escapes and number forms kept
// (jsonb would have sorted the keys, re-spaced, de-duplicated and
// de-escaped them).
func TestDataIsReadBackByteForByte(t *testing.T) {
	s, pool := newStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var big strings.Builder
	big.WriteString(`{"blob": "`)
	for big.Len() < 1<<20 {
		big.WriteString(`héllo 世界 😀 \"q\" \u00e9\n `)
	}
	big.WriteString(`" , "end":true}`)

	cases := []struct{ data, meta string }{
		{`{"b":1, "a":[2,  3]}`, `{ "z" : null ,"y":"é"}`},
		{`{"s":"héllo wörld 世界 😀", "e":"\u00e9\ud83d\ude00\uD83D\uDE00", "esc":"\\u0000 \"q\" \/ \t",
	"n":1.50, "x":1E+2, "big":1e400, "dup":1, "dup":2}`, ``},
		{` [1 ,2 ] `, `"just a string"`},
		{`"\u0001"`, `{"a\\":"\\"}`},
		{big.String(), `{"causation":"c-1"}`},
		// Valid JSON jsonb refused and json keeps (the adapter does not
		// check numbers; encoding/json never writes one this large).
		{`{"huge":1e1000000}`, ``},
	}
	stream := "bytes-" + uuid.NewString()[:8]
	var sent []eventstore.EventData
	for i, c := range cases {
		e := eventstore.EventData{ID: uuid.New(), Type: fmt.Sprintf("T%d", i), Data: []byte(c.data)}
		if c.meta != "" {
			e.Metadata = []byte(c.meta)
		}
		sent = append(sent, e)
	}
	res, err := s.Append(ctx, eventstore.StreamAppend{Stream: stream, Expected: eventstore.NoStream, Events: sent})
	if err != nil {
		t.Fatal(err)
	}

	check := func(how string, got []eventstore.RecordedEvent) {
		t.Helper()
		if len(got) != len(sent) {
			t.Fatalf("%s: %d events, want %d", how, len(got), len(sent))
		}
		for i, e := range got {
			if string(e.Data) != string(sent[i].Data) {
				t.Errorf("%s: event %d data\n got %.200q\nsent %.200q", how, i, e.Data, sent[i].Data)
			}
			if string(e.Metadata) != string(sent[i].Metadata) || (e.Metadata == nil) != (sent[i].Metadata == nil) {
				t.Errorf("%s: event %d metadata %q, sent %q", how, i, e.Metadata, sent[i].Metadata)
			}
		}
	}
	got, err := s.ReadStream(ctx, stream, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	check("ReadStream", got)
	// ReadAll returns the events once no older transaction anywhere on the
	// server is still open (other tests share it).
	storetest.WaitReadable(t, s, res.Position)
	all, err := s.ReadAll(ctx, eventstore.Start, 0)
	if err != nil {
		t.Fatal(err)
	}
	check("ReadAll", all)

	// And so does SQL: the column is json, its text the bytes sent.
	var typ, text string
	if err := pool.QueryRow(ctx, `SELECT pg_typeof(data)::text, data::text FROM es_events WHERE event_id = $1`, sent[0].ID).Scan(&typ, &text); err != nil {
		t.Fatal(err)
	}
	if typ != "json" || text != cases[0].data {
		t.Fatalf("es_events.data is %s %q; want json %q", typ, text, cases[0].data)
	}
}

// TestAppendRefusesWhatJSONBRefused: the store refuses the same data and
// metadata it refused while the columns were jsonb (invalid JSON, invalid
// UTF-8, the escape \u0000, unpaired surrogate escapes), and accepts what
// jsonb accepted. Each case is checked against jsonb itself, and appended
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
		{"high surrogate, then a low one's digits unescaped", `"\ud83dxude00"`, true},
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
				if string(got) != c.json {
					t.Fatalf("%s %q read back as %q", field, c.json, got)
				}
			}
		})
	}
}

// TestEmptyDataIsStoredAsNull: an event without data (nil or empty) is
// stored with the JSON null, not refused by the NOT NULL column; its
// metadata, absent, stays absent.
func TestEmptyDataIsStoredAsNull(t *testing.T) {
	s, _ := newStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stream := "empty-" + uuid.NewString()[:8]
	if _, err := s.Append(ctx, eventstore.StreamAppend{Stream: stream, Expected: eventstore.NoStream, Events: []eventstore.EventData{
		{ID: uuid.New(), Type: "Nil"}, {ID: uuid.New(), Type: "Empty", Data: []byte{}}}}); err != nil {
		t.Fatal(err)
	}
	got, err := s.ReadStream(ctx, stream, 0, 0)
	if err != nil || len(got) != 2 {
		t.Fatalf("read %d events, %v", len(got), err)
	}
	for _, e := range got {
		if string(e.Data) != "null" || e.Metadata != nil {
			t.Fatalf("%s: data %q, metadata %q; want null and none", e.Type, e.Data, e.Metadata)
		}
	}
}
