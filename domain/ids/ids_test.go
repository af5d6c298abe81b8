package ids

import (
	"encoding/hex"
	"testing"
	"time"
)

func TestRecordIsTimeThenRandom(t *testing.T) {
	at := time.Date(2026, 12, 1, 20, 0, 0, 0, time.UTC)
	id := Record(at, [8]byte{1, 2, 3, 4, 5, 6, 7, 0xff})
	if !IsRecord(id) {
		t.Fatalf("%q is not a record id", id)
	}
	b, _ := hex.DecodeString(id)
	if got := int64(b[0])<<24 | int64(b[1])<<16 | int64(b[2])<<8 | int64(b[3]); got != at.Unix() {
		t.Fatalf("time bytes %d, want %d", got, at.Unix())
	}
	if id[8:] != "01020304050607ff" {
		t.Fatalf("random part %q", id[8:])
	}
}

func TestDerivedIsStablePerSeed(t *testing.T) {
	at := time.Unix(1_780_000_000, 0)
	a, b := Derived(at, "e1/commission"), Derived(at, "e1/delivery")
	if a != Derived(at, "e1/commission") || a == b || !IsRecord(a) || !IsRecord(b) {
		t.Fatalf("derived ids %q %q", a, b)
	}
}

func TestShapes(t *testing.T) {
	for _, c := range []struct {
		s             string
		record, token bool
	}{
		{"65f1a2b3c4d5e6f708192a3b", true, false},
		{"65F1A2B3C4D5E6F708192A3B", false, false}, // lowercase only
		{"65f1a2b3c4d5e6f708192a3", false, false},
		{"0190a3c4-5b6d-7e8f-9a0b-1c2d3e4f5a6b", false, false}, // an earlier build's UUID
		{"PY_abcdefghij0123456789", false, true},
		{"PY_abcdefghij012345678", false, false}, // 19 characters
		{"PY_abcdefghij01234567-9", false, false},
		{"PT_ABCDEFGHIJ0123456789", false, false}, // an earlier build's token
	} {
		if IsRecord(c.s) != c.record || IsToken(c.s) != c.token {
			t.Errorf("%q: record %v token %v, want %v %v", c.s, IsRecord(c.s), IsToken(c.s), c.record, c.token)
		}
	}
}
