package eventstore_test

import (
	"testing"

	"github.com/escrowd/escrowd/eventstore"
)

func TestTenantOf(t *testing.T) {
	for _, c := range []struct {
		meta          string
		merchant, env string
		ok            bool
	}{
		{`{"merchantId":"m1","environment":"test","actor":"k","occurredAt":"2026-11-28T00:00:00Z"}`, "m1", "test", true},
		{`{"occurredAt":"x","nested":{"merchantId":"no"},"list":[1,{"a":"b"}],"environment":"live","merchantId":"m2"}`, "m2", "live", true},
		{` { "merchantId" : "m\u0033" , "environment" : "test" } `, "m3", "test", true},
		{`{"merchantId":"m0","environment":"test","merchantId":"m1"}`, "m1", "test", true}, // the last, as ->> reads it
		{`{"merchantId":"m1"}`, "m1", "", false},
		{`{"environment":"test"}`, "", "test", false},
		{`{"merchantId":"","environment":"test"}`, "", "test", false},
		{`{"MerchantId":"m1","environment":"test"}`, "", "test", false}, // names match exactly
		{`{"merchantId":7,"environment":"test"}`, "", "", false},
		{`{"merchantId":"m1","environment":"test"} {}`, "", "", false},
		{`{"merchantId":"m1","environment":"test"`, "", "", false},
		{`["merchantId","m1"]`, "", "", false},
		{`null`, "", "", false},
		{``, "", "", false},
	} {
		m, env, ok := eventstore.TenantOf([]byte(c.meta))
		if m != c.merchant || env != c.env || ok != c.ok {
			t.Errorf("TenantOf(%s) = %q, %q, %v; want %q, %q, %v", c.meta, m, env, ok, c.merchant, c.env, c.ok)
		}
	}
}
