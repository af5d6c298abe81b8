package reference

import (
	"strings"
	"testing"
)

func TestNormalizePhone(t *testing.T) {
	ng, _ := FindCountry("NG")
	gh, _ := FindCountry("cty_gh")
	tests := []struct {
		country Country
		in      string
		want    string
		ok      bool
	}{
		{ng, "08031234567", "08031234567", true},
		{ng, "2348031234567", "08031234567", true},
		{ng, "23408031234567", "08031234567", true},
		{ng, "+2348031234567", "", false},
		{ng, "0803 123 4567", "", false},
		{ng, "8031234567", "", false},
		{ng, "080312345678", "", false},
		{ng, "", "", false},
		{ng, "2330241234567", "", false},
		{gh, "0241234567", "0241234567", true},
		{gh, "233241234567", "0241234567", true},
		{gh, "2330241234567", "0241234567", true},
	}
	for _, tt := range tests {
		got, ok := NormalizePhone(tt.country, tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("NormalizePhone(%s, %q) = %q, %v; want %q, %v", tt.country.ISOCode, tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func TestFindCountry(t *testing.T) {
	for _, in := range []string{"NG", "ng", "cty_ng", " NG "} {
		if c, ok := FindCountry(in); !ok || c.ISOCode != "NG" {
			t.Errorf("FindCountry(%q) = %v, %v", in, c, ok)
		}
	}
	if _, ok := FindCountry("XX"); ok {
		t.Error("FindCountry(XX) should fail")
	}
}

func TestPhoneCandidatesPrefersCountry(t *testing.T) {
	gh, _ := FindCountry("GH")
	got := PhoneCandidates(gh, "2348031234567")
	if len(got) != 1 || got[0] != "08031234567" {
		t.Fatalf("got %v", got)
	}
}

// FuzzNormalizePhone: whatever the input, an accepted number is the local
// form (0 then the national digits), and normalising it again is stable.
func FuzzNormalizePhone(f *testing.F) {
	for _, s := range []string{"08031234567", "2348031234567", "23408031234567", "+234", "", "0", "2340"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		for _, c := range Countries {
			out, ok := NormalizePhone(c, in)
			if !ok {
				continue
			}
			if len(out) != c.NationalLength+1 || out[0] != '0' || strings.Trim(out, "0123456789") != "" {
				t.Fatalf("%s: %q -> %q", c.ISOCode, in, out)
			}
			again, ok2 := NormalizePhone(c, out)
			if !ok2 || again != out {
				t.Fatalf("%s: not idempotent: %q -> %q -> %q", c.ISOCode, in, out, again)
			}
		}
	})
}
