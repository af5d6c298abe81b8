package eventstore

import "testing"

// FuzzTenantOfMeta: wherever the shortcut for domain.Meta's shape answers,
// it answers as reading the metadata token by token does.
func FuzzTenantOfMeta(f *testing.F) {
	for _, s := range []string{
		`{"merchantId":"m1","environment":"test","actor":"k","occurredAt":"2026-11-28T00:00:00Z"}`,
		`{"merchantId":"m1","environment":"test"}`,
		`{"merchantId":"m1","environment":"test","merchantId":"m2"}`,
		`{"merchantId":"m1","environment":"test","x":{"environment":"live"}}`,
		`{"merchantId":"m1","environment":"test","x":"environment"}`,
		`{"merchantId":"m\u0031","environment":"test"}`,
		`{"merchantId":"m1","environment":"test","merch\u0061ntId":"m2"}`,
		`{"merchantId":"m1","environment":"test"} {}`,
		`{"merchantId":"m1","environment":"test"`,
		`{"merchantId":"m1","environment":"te` + "\x01" + `st"}`,
		`{"merchantId":"","environment":"test"}`,
		`{"merchantId":"m1","environment":""}`,
		`{"merchantId":"m1","environment":"test","n":1e400}`,
		"{\"merchantId\":\"m\xff\",\"environment\":\"test\"}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, env, ok := tenantOfMeta(b)
		if !ok {
			return
		}
		wm, wenv, wok := tenantOfTokens(b)
		if m != wm || env != wenv || ok != wok {
			t.Fatalf("tenantOfMeta(%q) = %q, %q, %v; token by token %q, %q, %v", b, m, env, ok, wm, wenv, wok)
		}
	})
}

// TestTenantOfMetaTakesMetasShape: the shortcut answers for the metadata
// domain.Meta writes (were it never to, TenantOf would only be slower).
func TestTenantOfMetaTakesMetasShape(t *testing.T) {
	m, env, ok := tenantOfMeta([]byte(`{"merchantId":"m1","environment":"live","actor":"k","occurredAt":"2026-11-28T00:00:00Z"}`))
	if m != "m1" || env != "live" || !ok {
		t.Fatalf("tenantOfMeta = %q, %q, %v", m, env, ok)
	}
}
