package paystackgw

import (
	"crypto/hmac"
	"crypto/sha512"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/escrowd/escrowd/internal/gateway"
)

func sign(key, body string) string {
	m := hmac.New(sha512.New, []byte(key))
	m.Write([]byte(body))
	return hex.EncodeToString(m.Sum(nil))
}

func TestAuthentic(t *testing.T) {
	body := `{"event":"transfer.success","data":{"id":1,"reference":"r"}}`
	e := Events{SecretKey: "sk_test_1"}
	good := sign("sk_test_1", body)
	for _, tc := range []struct {
		name, body, sig string
		want            bool
	}{
		{"signed", body, good, true},
		{"uppercase hex is the same bytes", body, strings.ToUpper(good), true},
		{"another key", body, sign("sk_test_2", body), false},
		{"body changed", body + " ", good, false},
		{"truncated", body, good[:64], false},
		{"not hex", body, "zz" + good[2:], false},
		{"missing", body, "", false},
	} {
		if got := e.Authentic([]byte(tc.body), tc.sig); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	if (Events{}).Authentic([]byte(body), sign("", body)) {
		t.Error("an empty key authenticates")
	}
}

func TestRead(t *testing.T) {
	for _, tc := range []struct {
		body string
		want gateway.ProviderEvent
		err  bool
	}{
		{`{"event":"transfer.reversed","data":{"id":42,"reference":"wd_1","status":"reversed"}}`,
			gateway.ProviderEvent{ID: "transfer.reversed:42", Name: "transfer.reversed", Kind: gateway.PayoutEvent, Reference: "wd_1"}, false},
		{`{"event":"charge.success","data":{"id":7,"reference":"T1","channel":"dedicated_nuban"}}`,
			gateway.ProviderEvent{ID: "charge.success:7", Name: "charge.success", Kind: gateway.ChargeEvent, Reference: "T1"}, false},
		{`{"event":"transfer.failed","data":{"id":1}}`, gateway.ProviderEvent{}, true},
		{`{"data":{}}`, gateway.ProviderEvent{}, true},
		{`not json`, gateway.ProviderEvent{}, true},
	} {
		got, err := Events{}.Read([]byte(tc.body))
		if (err != nil) != tc.err || (!tc.err && got != tc.want) {
			t.Errorf("%s: %+v, %v", tc.body, got, err)
		}
	}
	// Without an id, the body's digest identifies the event.
	a, _ := Events{}.Read([]byte(`{"event":"subscription.create","data":{}}`))
	b, _ := Events{}.Read([]byte(`{"event":"subscription.create","data":{"x":1}}`))
	if a.Kind != gateway.OtherEvent || a.ID == b.ID || !strings.HasPrefix(a.ID, "subscription.create:sha256:") {
		t.Errorf("ids %q %q", a.ID, b.ID)
	}
}
