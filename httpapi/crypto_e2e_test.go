package httpapi

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/merchant"
	"github.com/escrowd/escrowd/internal/gateway"
)

const (
	masterTest = "0x52908400098527886E0F7030069857D2E4169EE7"
	masterLive = "0x8617E340B3D01FA5F11F306F4090FD50E238070D"
)

func bscAddr(i int) string { return fmt.Sprintf("0x%040x", 0xabc000+i) }

func whitelistBody(addr string, extra ...any) map[string]any {
	b := map[string]any{"walletAddress": addr, "network": "BSC"}
	for i := 0; i+1 < len(extra); i += 2 {
		b[extra[i].(string)] = extra[i+1]
	}
	return b
}

func TestWhitelistAddresses(t *testing.T) {
	h := newHarness(t)
	cust := h.createCustomer(h.sa(), "ada@example.com", "08031234567")
	other := h.createCustomer(h.sa(), "bob@example.com", "08031234568")
	add := func(cid string, body any) resp {
		return h.do(req{method: "POST", path: "/v1/whitelist-address", key: h.std(), cid: cid, body: body})
	}
	list := func(cid string) []map[string]any {
		t.Helper()
		r := h.do(req{method: "GET", path: "/v1/whitelist-address", key: h.std(), cid: cid}).
			expect(t, 200, "Whitelisted addresses fetched successfully")
		rows, ok := r.Data.([]any)
		if !ok {
			t.Fatalf("list data is not an array: %s", r.Raw)
		}
		out := make([]map[string]any, len(rows))
		for i, row := range rows {
			out[i] = row.(map[string]any)
		}
		return out
	}
	if got := list(cust); len(got) != 0 {
		t.Fatalf("empty list %v", got)
	}

	// The record; otp is accepted and ignored, the network is upper-cased.
	mixed := "0xAbCdEf0123456789abcdef0123456789ABCDEF01"
	rec := add(cust, whitelistBody(mixed, "network", "bsc", "label", "Ledger", "otp", "123456")).
		expect(t, 201, "Wallet address whitelisted successfully").obj()
	if rec["walletAddress"] != mixed || rec["network"] != "BSC" || rec["label"] != "Ledger" || rec["dateAdded"] != rec["lastUpdated"] {
		t.Fatalf("record %v", rec)
	}
	if len(rec) != 6 {
		t.Fatalf("record fields %v", rec)
	}
	id, _ := rec["id"].(string)
	if !recordIDShape.MatchString(id) {
		t.Fatalf("id %q", id)
	}
	if _, err := time.Parse(time.RFC3339, rec["dateAdded"].(string)); err != nil || !strings.HasSuffix(rec["dateAdded"].(string), "Z") {
		t.Fatalf("dateAdded %v (%v)", rec["dateAdded"], err)
	}
	// Read after write: the list shows it at once, exactly as POST returned it.
	if got := list(cust); len(got) != 1 || fmt.Sprint(got[0]) != fmt.Sprint(rec) {
		t.Fatalf("list %v, want [%v]", got, rec)
	}

	badAddress := "walletAddress must be 0x followed by 40 hexadecimal characters"
	cases := []struct {
		name   string
		cid    string
		body   any
		status int
		msg    string
	}{
		{"duplicate in other case", cust, whitelistBody(strings.ToLower(mixed)), 400, "Address already whitelisted"},
		{"duplicate upper case", cust, whitelistBody("0x" + strings.ToUpper(mixed[2:])), 400, "Address already whitelisted"},
		{"short address", cust, whitelistBody("0x1234"), 400, badAddress},
		{"non-hex address", cust, whitelistBody("0x" + strings.Repeat("z", 40)), 400, badAddress},
		{"no 0x", cust, whitelistBody(strings.Repeat("a", 42)), 400, badAddress},
		{"missing address", cust, map[string]any{"network": "BSC"}, 400, badAddress},
		{"other network", cust, whitelistBody(bscAddr(1), "network", "ETH"), 400, "network must be BSC"},
		{"missing network", cust, map[string]any{"walletAddress": bscAddr(1)}, 400, "network must be BSC"},
		{"label too long", cust, whitelistBody(bscAddr(1), "label", strings.Repeat("x", 51)), 400, "label must be at most 50 characters"},
		{"wrong type", cust, map[string]any{"walletAddress": 5, "network": "BSC"}, 400, "walletAddress has the wrong type"},
		{"malformed JSON", cust, "{nope", 400, "Invalid JSON body"},
		{"missing customer-id", "", whitelistBody(bscAddr(1)), 400, "customer-id header is required"},
		{"unknown customer", "nobody", whitelistBody(bscAddr(1)), 404, "Customer not found"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { add(c.cid, c.body).expect(t, c.status, c.msg) })
	}
	// A label of exactly 50 characters is fine.
	add(cust, whitelistBody(bscAddr(1), "label", strings.Repeat("é", 50))).expect(t, 201, "Wallet address whitelisted successfully")

	// The limit: ten per customer.
	for i := 2; i < 10; i++ {
		add(cust, whitelistBody(bscAddr(i))).expect(t, 201, "")
	}
	add(cust, whitelistBody(bscAddr(10))).expect(t, 400, "Whitelist limit reached")
	got := list(cust)
	if len(got) != 10 || got[0]["walletAddress"] != bscAddr(9) || got[9]["id"] != id {
		t.Fatalf("list of %d, newest first expected: first %v last %v", len(got), got[0], got[len(got)-1])
	}

	// Tenant isolation: another customer sees none of them and cannot remove them.
	if got := list(other); len(got) != 0 {
		t.Fatalf("other customer sees %v", got)
	}
	h.do(req{method: "DELETE", path: "/v1/whitelist-address/" + id, key: h.std(), cid: other}).expect(t, 404, "Address not found")
	add(other, whitelistBody(mixed)).expect(t, 201, "") // the same address is free for another customer
	otherMerchant := h.newMerchant(false)
	h.do(req{method: "GET", path: "/v1/whitelist-address", key: key(otherMerchant, domain.Test, merchant.Standard), cid: cust}).
		expect(t, 403, "Customer does not belong to the merchant")
	h.do(req{method: "GET", path: "/v1/whitelist-address", key: key(h.m, domain.Live, merchant.Standard), host: liveHost, cid: cust}).
		expect(t, 403, "Customer does not belong to the merchant")

	// Remove.
	h.do(req{method: "DELETE", path: "/v1/whitelist-address/" + id, key: h.std()}).expect(t, 400, "customer-id header is required")
	h.do(req{method: "DELETE", path: "/v1/whitelist-address/unknown", key: h.std(), cid: cust}).expect(t, 404, "Address not found")
	del := h.do(req{method: "DELETE", path: "/v1/whitelist-address/" + id, key: h.std(), cid: cust}).
		expect(t, 200, "Wallet address removed successfully").obj()
	if del["id"] != id || del["walletAddress"] != mixed {
		t.Fatalf("removed record %v", del)
	}
	h.do(req{method: "DELETE", path: "/v1/whitelist-address/" + id, key: h.std(), cid: cust}).expect(t, 404, "Address not found")
	got = list(cust)
	if len(got) != 9 {
		t.Fatalf("%d after removal", len(got))
	}
	for _, a := range got {
		if a["id"] == id {
			t.Fatal("removed address still listed")
		}
	}
	// The freed slot takes the removed address again, under a new id.
	again := add(cust, whitelistBody(strings.ToLower(mixed))).expect(t, 201, "").obj()
	if again["id"] == id || list(cust)[0]["id"] != again["id"] {
		t.Fatalf("re-added %v", again)
	}

	h.do(req{method: "GET", path: "/v1/whitelist-address", key: h.std()}).expect(t, 400, "customer-id header is required")
	h.do(req{method: "GET", path: "/v1/whitelist-address", cid: cust}).expect(t, 401, "No token provided")

	// Idempotency keys apply to the POST.
	idem := map[string]string{"Idempotency-Key": "wl-1"}
	r1 := h.do(req{method: "POST", path: "/v1/whitelist-address", key: h.std(), cid: other, body: whitelistBody(bscAddr(20)), headers: idem}).expect(t, 201, "")
	r2 := h.do(req{method: "POST", path: "/v1/whitelist-address", key: h.std(), cid: other, body: whitelistBody(bscAddr(20)), headers: idem})
	if r2.Status != 201 || string(r2.Raw) != string(r1.Raw) || r2.Header.Get("Idempotency-Replayed") != "true" {
		t.Fatalf("replay %d %s", r2.Status, r2.Raw)
	}
}

// The live environment keeps its own whitelists.
func TestWhitelistLiveEnvironment(t *testing.T) {
	h := newHarness(t)
	liveSA, liveStd := key(h.m, domain.Live, merchant.SuperAdmin), key(h.m, domain.Live, merchant.Standard)
	liveCust := h.do(req{method: "POST", path: "/v1/customer/create", key: liveSA, host: liveHost,
		body: customerBody("live@example.com", "08031234569")}).expect(t, 201, "").obj()["customerId"].(string)
	testCust := h.createCustomer(h.sa(), "test@example.com", "08031234569")
	for _, c := range []struct{ key, host, cid string }{{liveStd, liveHost, liveCust}, {h.std(), "", testCust}} {
		h.do(req{method: "POST", path: "/v1/whitelist-address", key: c.key, host: c.host, cid: c.cid, body: whitelistBody(bscAddr(1))}).
			expect(t, 201, "Wallet address whitelisted successfully")
	}
	got := h.do(req{method: "GET", path: "/v1/whitelist-address", key: liveStd, host: liveHost, cid: liveCust}).expect(t, 200, "")
	if rows := got.Data.([]any); len(rows) != 1 {
		t.Fatalf("live list %s", got.Raw)
	}
}

func TestMasterWalletAddress(t *testing.T) {
	testOnly := newHarness(t, func(c *Config) { c.BSCMasterAddress = map[domain.Environment]string{domain.Test: masterTest} })
	liveOnly := newHarness(t, func(c *Config) { c.BSCMasterAddress = map[domain.Environment]string{domain.Live: masterLive} })
	unset := newHarness(t)
	paths := []string{"/v1/payment/get-master-wallet-address", "/v1/payment/deposit/wallet"}
	for _, path := range paths {
		t.Run(path, func(t *testing.T) {
			// CID is ignored, even one naming no customer.
			r := testOnly.do(req{path: path, key: testOnly.std(), cid: "whoever"}).expect(t, 200, "Master wallet address fetched successfully").obj()
			expectMasterExtras(t, r, masterTest)
			want := map[string]any{"address": masterTest, "network": "BSC", "networkId": 97.0,
				"explorerUrl": "https://testnet.bscscan.com/address/" + masterTest}
			if fmt.Sprint(r) != fmt.Sprint(want) {
				t.Fatalf("test: %v, want %v", r, want)
			}
			const notConfigured = "Crypto is not configured for this environment"
			// No chain adapter watches live: an address configured for it
			// is never offered, since nothing would credit what is sent.
			liveOnly.do(req{path: path, key: key(liveOnly.m, domain.Live, merchant.Standard), host: liveHost}).expect(t, 400, notConfigured)
			testOnly.do(req{path: path, key: key(testOnly.m, domain.Live, merchant.SuperAdmin), host: liveHost}).expect(t, 400, notConfigured)
			liveOnly.do(req{path: path, key: liveOnly.sa()}).expect(t, 400, notConfigured)
			unset.do(req{path: path, key: unset.std()}).expect(t, 400, notConfigured)
			unset.do(req{path: path}).expect(t, 401, "No token provided")
		})
	}
}

func TestVirtualAccountIsGone(t *testing.T) {
	h := newHarness(t)
	const msg = "Virtual accounts are no longer issued. Create an escrow, collect payment with POST /v1/payment/create-intent, " +
		"then confirm it with POST /v1/payment/verify"
	cust := h.createCustomer(h.sa(), "ada@example.com", "08031234567")
	for _, r := range []req{
		{method: "POST", path: "/v1/payment/virtual-account", key: h.std()},
		{method: "POST", path: "/v1/payment/virtual-account", key: h.sa(), cid: cust, body: map[string]any{"amount": 5000}},
		{method: "POST", path: "/v1/payment/virtual-account", key: h.std(), cid: "unknown"},
		{method: "POST", path: "/v1/payment/virtual-account", key: key(h.m, domain.Live, merchant.Standard), host: liveHost},
	} {
		h.do(r).expect(t, 410, msg)
	}
	h.do(req{method: "POST", path: "/v1/payment/virtual-account"}).expect(t, 401, "No token provided")
}

// A live crypto withdrawal is refused before anything is staged, even with
// a master address and payout gateways configured for live: nothing sends
// it on the chain.
func TestLiveCryptoWithdrawalRefused(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.BSCMasterAddress = map[domain.Environment]string{domain.Live: masterLive} })
	h.svc.Gateways[domain.Live] = gateway.Test()
	liveSA, liveStd := key(h.m, domain.Live, merchant.SuperAdmin), key(h.m, domain.Live, merchant.Standard)
	cust := h.do(req{method: "POST", path: "/v1/customer/create", key: liveSA, host: liveHost,
		body: customerBody("livecrypto@example.com", "08031234570")}).expect(t, 201, "").obj()["customerId"].(string)
	addr := bscAddr(7)
	h.do(req{method: "POST", path: "/v1/whitelist-address", key: liveStd, host: liveHost, cid: cust, body: whitelistBody(addr)}).expect(t, 201, "")
	h.do(req{method: "POST", path: "/v1/payment/create-intent", key: liveStd, host: liveHost, cid: cust,
		body: map[string]any{"reference": "live-crypto-1", "amount": 100, "transactionType": "withdrawal",
			"blockchainDetails": map[string]any{"toAddress": addr, "network": "BSC"}}}).
		expect(t, 400, "Crypto is not configured for this environment")
	h.do(req{method: "POST", path: "/v1/payment/verify", key: liveStd, host: liveHost, cid: cust,
		body: map[string]any{"reference": "live-crypto-1"}}).expect(t, 400, "Transaction not found")
}
