package webhooks

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/escrow"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/view"
)

var t0 = time.Date(2026, 3, 1, 12, 30, 45, 123456789, time.FixedZone("WAT", 3600))

func created() escrow.Created {
	return escrow.Created{ID: "esc1", PaymentToken: "PT_ABCDEFGHIJKLMNOP", MerchantID: "m1", Environment: domain.Test,
		SellerID: "sel", Terms: escrow.Terms{Amount: 1_000_000, Purpose: "Phone", WhoPays: escrow.Buyer, MaxDelivery: 3,
			DeliveryTimeline: "days"}, Fee: 25_000, Channel: "API", At: t0}
}

func vaultCreated() escrow.VaultCreated {
	return escrow.VaultCreated{ID: "esc1", PaymentToken: "PT_ABCDEFGHIJKLMNOP", MerchantID: "m1", Environment: domain.Test,
		Terms: escrow.Terms{Amount: 1_000_000, Purpose: "Pool"}, Fee: 25_000, Participants: []escrow.Participant{
			{CustomerID: "a", Amount: 500_000, Status: escrow.ParticipantStaked, StakedAt: t0},
			{CustomerID: "b", Amount: 500_000, Status: escrow.ParticipantStaked, StakedAt: t0}}, At: t0}
}

func decodeBody(t *testing.T, m Message) Envelope {
	t.Helper()
	var env Envelope
	dec := json.NewDecoder(strings.NewReader(string(m.Body)))
	if err := dec.Decode(&env); err != nil {
		t.Fatal(err)
	}
	return env
}

func TestEscrowMessages(t *testing.T) {
	pending := escrow.Apply(escrow.State{}, created())
	ongoing := escrow.Apply(pending, escrow.Funded{BuyerID: "buy", PaymentID: "p1", Paid: 1_025_000, At: t0})
	release := func(st escrow.Status) escrow.Released { return escrow.Released{Status: st, At: t0} }
	vault := escrow.Apply(escrow.State{}, vaultCreated())
	for _, tc := range []struct {
		name   string
		before escrow.State
		ev     domain.Event
		want   []string
		status escrow.Status
	}{
		{"created", escrow.State{}, created(), []string{"escrow.created"}, escrow.Pending},
		{"clone created", escrow.State{}, func() escrow.Created { c := created(); c.ParentID = "link"; return c }(), []string{"escrow.created"}, escrow.Pending},
		{"edited", pending, escrow.Edited{Terms: pending.Terms, Fee: pending.Fee, At: t0}, nil, ""},
		{"additional fee", pending, escrow.AdditionalFeeSet{AdditionalFee: 50_000, At: t0}, nil, ""},
		{"unit sold", pending, escrow.UnitSold{CloneID: "c", Remaining: 2, At: t0}, nil, ""},
		{"deleted", pending, escrow.Deleted{At: t0}, []string{"escrow.deleted"}, escrow.Pending},
		{"funded", pending, escrow.Funded{BuyerID: "buy", At: t0}, []string{"escrow.ongoing"}, escrow.Ongoing},
		{"completed", ongoing, release(escrow.Completed), []string{"escrow.completed"}, escrow.Completed},
		{"claimed", ongoing, release(escrow.Claimed), []string{"escrow.claimed"}, escrow.Claimed},
		// Any status change is announced, whatever event makes it.
		{"refunded", ongoing, release(escrow.Refunded), []string{"escrow.refunded"}, escrow.Refunded},
		{"split", ongoing, release(escrow.Split), []string{"escrow.split"}, escrow.Split},
		// A vault is created funded: created and ongoing at once.
		{"vault created", escrow.State{}, vaultCreated(), []string{"escrow.created", "escrow.ongoing"}, escrow.Ongoing},
		{"vault won", vault, escrow.VaultSettled{Status: escrow.Completed, WinnerID: "a", At: t0}, []string{"escrow.completed"}, escrow.Completed},
		{"vault cancelled", vault, escrow.VaultSettled{Status: escrow.Refunded, At: t0}, []string{"escrow.refunded"}, escrow.Refunded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			after := escrow.Apply(tc.before, tc.ev)
			evID := uuid.New()
			msgs, err := EscrowMessages(evID, tc.ev, tc.before, after, nil, t0)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for i, m := range msgs {
				got = append(got, m.Event)
				env := decodeBody(t, m)
				data := env.Data.(map[string]any)
				if env.ID != m.ID.String() || env.Event != m.Event || env.Timestamp != "2026-03-01T11:30:45.123Z" ||
					m.MerchantID != "m1" || m.Environment != domain.Test || m.OrderKey != "esc1" {
					t.Fatalf("message %+v body %s", m, m.Body)
				}
				if data["id"] != "esc1" || data["status"] != string(tc.status) || data["isSeller"] != (after.IsMerchantSale() && after.Type() != escrow.VaultSettlement) ||
					data["merchantId"] != "m1" || data["amount"] != 10000.0 {
					t.Fatalf("data %v", data)
				}
				// Deterministic: the same event maps to the same id.
				again, _ := EscrowMessages(evID, tc.ev, tc.before, after, nil, t0)
				if again[i].ID != m.ID || string(again[i].Body) != string(m.Body) {
					t.Fatal("mapping is not deterministic")
				}
				other, _ := EscrowMessages(uuid.New(), tc.ev, tc.before, after, nil, t0)
				if other[i].ID == m.ID {
					t.Fatal("two events share a message id")
				}
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("events %v, want %v", got, tc.want)
			}
		})
	}
}

func TestEscrowMessageCategory(t *testing.T) {
	c := created()
	c.Terms.CategoryID = "cat1"
	after := escrow.Apply(escrow.State{}, c)
	cat := &view.Category{ID: "cat1", Name: "Phones"}
	msgs, err := EscrowMessages(uuid.New(), c, escrow.State{}, after, cat, t0)
	if err != nil {
		t.Fatal(err)
	}
	data := decodeBody(t, msgs[0]).Data.(map[string]any)
	if data["categoryId"] != "cat1" || data["category"].(map[string]any)["name"] != "Phones" {
		t.Fatalf("data %v", data)
	}
}

func txRecord(id string, typ ledger.Type, st ledger.Status) ledger.Record {
	return ledger.Record{ID: id, Reference: "ref-" + id, Amount: 500_000, Currency: "NGN", Status: st, Type: typ,
		CreditType: ledger.Credit, MerchantID: "m1", Environment: domain.Live, CreatedAt: t0, UpdatedAt: t0}
}

func TestPaymentMessages(t *testing.T) {
	for _, tc := range []struct {
		rec  ledger.Record
		want string
	}{
		{txRecord("r1", ledger.Deposit, ledger.Success), "payment.deposit.success"},
		{txRecord("r1", ledger.Deposit, ledger.Failed), "payment.deposit.failed"},
		{txRecord("r1", ledger.Deposit, ledger.Pending), ""},
		{txRecord("r2", ledger.Withdrawal, ledger.Reversed), "payment.withdrawal.reversed"},
		{txRecord("r2", ledger.Withdrawal, ledger.Pending), ""},
		{txRecord("r4", ledger.WalletTransfer, ledger.Success), "payment.wallet_transfer.success"},
		{txRecord("r5", ledger.EscrowPayment, ledger.Success), "payment.escrow.success"},
		{txRecord("r6", ledger.Commission, ledger.Success), "payment.commission.success"},
		{txRecord("r7", ledger.Delivery, ledger.Success), "payment.delivery.success"},
		{txRecord("r8", ledger.EscrowRelease, ledger.Success), ""},
		{txRecord("r9", ledger.EscrowRefund, ledger.Success), ""},
		{txRecord("r10", ledger.VaultStake, ledger.Success), ""},
		{txRecord("r11", ledger.VaultPayout, ledger.Success), ""},
		{txRecord("r12", ledger.VaultRefund, ledger.Success), ""},
		{txRecord("r13", ledger.Refund, ledger.Success), "payment.refund.success"},
	} {
		t.Run(tc.rec.ID+"/"+string(tc.rec.Type)+"/"+string(tc.rec.Status), func(t *testing.T) {
			msgs, err := PaymentMessages(ledger.Effect{Records: []ledger.Record{tc.rec}}, t0)
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "" {
				if len(msgs) != 0 {
					t.Fatalf("unexpected %v", msgs[0].Event)
				}
				return
			}
			if len(msgs) != 1 || msgs[0].Event != tc.want {
				t.Fatalf("got %v, want %s", msgs, tc.want)
			}
			m := msgs[0]
			env := decodeBody(t, m)
			data := env.Data.(map[string]any)
			if m.MerchantID != "m1" || m.Environment != domain.Live || m.OrderKey != "" || data["reference"] != "ref-"+tc.rec.ID ||
				data["transactionType"] != string(tc.rec.Type) || data["status"] != string(tc.rec.Status) || data["amount"] != 5000.0 {
				t.Fatalf("message %+v data %v", m, data)
			}
		})
	}
	// A record announces its settlement once: its id does not depend on
	// the event that settled it, or on whether it succeeded or failed. A
	// reversal (which can follow a success) is announced once more.
	a, _ := PaymentMessages(ledger.Effect{Records: []ledger.Record{txRecord("r1", ledger.Withdrawal, ledger.Success)}}, t0)
	again, _ := PaymentMessages(ledger.Effect{Records: []ledger.Record{txRecord("r1", ledger.Withdrawal, ledger.Success)}}, t0.Add(time.Minute))
	failed, _ := PaymentMessages(ledger.Effect{Records: []ledger.Record{txRecord("r1", ledger.Withdrawal, ledger.Failed)}}, t0)
	b, _ := PaymentMessages(ledger.Effect{Records: []ledger.Record{txRecord("r1", ledger.Withdrawal, ledger.Reversed)}}, t0.Add(time.Hour))
	b2, _ := PaymentMessages(ledger.Effect{Records: []ledger.Record{txRecord("r1", ledger.Withdrawal, ledger.Reversed)}}, t0.Add(2*time.Hour))
	c, _ := PaymentMessages(ledger.Effect{Records: []ledger.Record{txRecord("r2", ledger.Withdrawal, ledger.Success)}}, t0)
	if a[0].ID != again[0].ID || a[0].ID != failed[0].ID || a[0].ID == c[0].ID {
		t.Fatal("payment message ids must follow the record id")
	}
	if b[0].ID == a[0].ID || b[0].ID != b2[0].ID {
		t.Fatal("a reversal must be announced once, apart from the settlement it reverses")
	}
	// Several records of one event (a wallet transfer's two sides).
	two, _ := PaymentMessages(ledger.Effect{Records: []ledger.Record{txRecord("x", ledger.WalletTransfer, ledger.Success),
		txRecord("y", ledger.WalletTransfer, ledger.Success)}}, t0)
	if len(two) != 2 || two[0].ID == two[1].ID {
		t.Fatalf("two records: %v", two)
	}
}

func TestSignVerify(t *testing.T) {
	body := []byte(`{"id":"1","event":"escrow.created"}`)
	sig := Sign("whsec_a", body)
	if len(sig) != 128 || strings.ToLower(sig) != sig {
		t.Fatalf("signature %q must be 128 lowercase hex characters", sig)
	}
	// Known answer: HMAC-SHA512("key", "The quick brown fox jumps over the lazy dog").
	if got := Sign("key", []byte("The quick brown fox jumps over the lazy dog")); got !=
		"b42af09057bac1e2d41708e48a902e09b5ff7f12ab428a4fe86653c73dd248fb82f948a549f7b791a5b41915ee4d1ec3935357e4e2317250d0372afa2ebeeb3a" {
		t.Fatalf("HMAC-SHA512 known answer: %s", got)
	}
	if !Verify("whsec_a", body, sig) || !Verify("whsec_a", body, strings.ToUpper(sig)) {
		t.Fatal("valid signature refused")
	}
	if Verify("whsec_b", body, sig) || Verify("whsec_a", append(body, ' '), sig) || Verify("whsec_a", body, "zz") {
		t.Fatal("invalid signature accepted")
	}
}

func TestNextDelay(t *testing.T) {
	for _, tc := range []struct {
		attempt int
		u       float64
		want    time.Duration
		ok      bool
	}{
		{1, 0.5, 5 * time.Second, true},
		{1, 0, 4500 * time.Millisecond, true},
		{1, 0.999999, 5500 * time.Millisecond, true},
		{2, 0.5, 5 * time.Minute, true},
		{3, 0.5, 30 * time.Minute, true},
		{4, 0.5, 2 * time.Hour, true},
		{5, 0.5, 5 * time.Hour, true},
		{6, 0.5, 10 * time.Hour, true},
		{7, 0.5, 10 * time.Hour, true},
		{8, 0.5, 24 * time.Hour, true},
		{8, 0, 24 * time.Hour * 9 / 10, true},
		{9, 0.5, 0, false},
		{0, 0.5, 0, false},
	} {
		got, ok := NextDelay(DefaultSchedule, tc.attempt, tc.u)
		if ok != tc.ok || (ok && (got-tc.want).Abs() > time.Millisecond) {
			t.Errorf("attempt %d u %v: %v %v, want %v %v", tc.attempt, tc.u, got, ok, tc.want, tc.ok)
		}
	}
}

type fakeResolver map[string][]string

func (f fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	ips, ok := f[host]
	if !ok {
		return nil, errors.New("no such host")
	}
	var out []netip.Addr
	for _, s := range ips {
		out = append(out, netip.MustParseAddr(s))
	}
	return out, nil
}

func TestValidateCallbackURL(t *testing.T) {
	r := fakeResolver{"hooks.example.com": {"93.184.216.34"}, "internal.example.com": {"93.184.216.34", "10.0.0.5"},
		"v6.example.com": {"::1"}, "mapped.example.com": {"::ffff:127.0.0.1"}, "localhost": {"127.0.0.1", "::1"},
		"metadata.example.com": {"169.254.169.254"}, "sixtofour.example.com": {"2002:a9fe:a9fe::1"}}
	const private = "url must be a public http(s) address" // one answer for every refusal
	for _, tc := range []struct {
		url          string
		env          domain.Environment
		allowPrivate bool
		want         string
	}{
		{"", domain.Live, false, ""},
		{"https://hooks.example.com/cb", domain.Live, false, ""},
		{"http://hooks.example.com/cb", domain.Test, false, ""},
		{"https://93.184.216.34/cb", domain.Live, false, ""},
		{"http://hooks.example.com/cb", domain.Live, false, private},
		{"http://hooks.example.com/cb", domain.Live, true, private},
		// Non-public addresses are refused in both environments.
		{"http://localhost:9000/cb", domain.Test, false, private},
		{"http://localhost:9000/cb", domain.Test, true, ""},
		{"https://localhost:9000/cb", domain.Live, false, private},
		{"https://internal.example.com/cb", domain.Live, false, private},
		{"http://internal.example.com/cb", domain.Test, false, private},
		{"https://internal.example.com/cb", domain.Live, true, ""},
		{"https://v6.example.com/cb", domain.Live, false, private},
		{"https://mapped.example.com/cb", domain.Live, false, private},
		{"http://metadata.example.com/latest/meta-data/", domain.Test, false, private},
		{"http://sixtofour.example.com/", domain.Test, false, private},
		// IP literals are checked without a lookup.
		{"https://[::127.0.0.1]/", domain.Live, false, private},
		{"https://[::127.0.0.1]/", domain.Test, false, private},
		{"http://[::ffff:169.254.169.254]/", domain.Test, false, private},
		{"http://[2002:7f00:1::]/", domain.Test, false, private},
		{"http://[64:ff9b::a00:1]/", domain.Test, false, private},
		{"http://127.0.0.1:8080/", domain.Test, false, private},
		{"http://[::]/", domain.Test, false, private},
		{"https://nowhere.example.com/cb", domain.Live, false, private},
		{"https://nowhere.example.com/cb", domain.Test, false, private},
		{"ftp://hooks.example.com/cb", domain.Test, false, private},
		{"/relative", domain.Test, false, private},
		{"https://user:pw@hooks.example.com/", domain.Test, false, private},
		{"https://hooks.example.com/" + strings.Repeat("a", domain.MaxURL), domain.Test, false, private},
	} {
		err := ValidateCallbackURL(context.Background(), tc.url, tc.env, tc.allowPrivate, r)
		got := ""
		if err != nil {
			got = err.Error()
			if domain.ErrorCode(err) != domain.Invalid {
				t.Errorf("%s: error code %s", tc.url, domain.ErrorCode(err))
			}
		}
		if got != tc.want {
			t.Errorf("%s (%s, private %v): %q, want %q", tc.url, tc.env, tc.allowPrivate, got, tc.want)
		}
	}
}

func TestNonPublic(t *testing.T) {
	for addr, want := range map[string]bool{
		// IPv4 special-purpose ranges.
		"127.0.0.1": true, "127.255.255.254": true, "10.1.2.3": true, "172.16.0.1": true, "172.31.255.255": true,
		"192.168.1.1": true, "169.254.169.254": true, "0.0.0.0": true, "0.1.2.3": true, "100.64.0.1": true,
		"100.127.255.255": true, "192.0.0.8": true, "192.0.2.1": true, "198.18.0.1": true, "198.51.100.7": true,
		"203.0.113.9": true, "224.0.0.1": true, "239.255.255.250": true, "240.0.0.1": true, "255.255.255.255": true,
		"192.88.99.1": true,
		// IPv6 and the IPv6 forms of non-public IPv4 addresses.
		"::1": true, "::": true, "fe80::1": true, "fe80::1%eth0": true, "fc00::1": true, "fd12:3456::1": true,
		"ff02::1": true, "ff05::2": true, "fec0::1": true, "2001:db8::1": true, "100::1": true, "2001:2::1": true,
		"::ffff:10.0.0.1": true, "::ffff:127.0.0.1": true, // mapped
		"::127.0.0.1": true, "::8.8.8.8": true, "::a9fe:a9fe": true, // compatible (deprecated: all refused)
		"::ffff:0:7f00:1": true,                                                                                    // translated
		"64:ff9b::7f00:1": true, "64:ff9b::a9fe:a9fe": true, "64:ff9b::c0a8:101": true, "64:ff9b:1::808:808": true, // NAT64
		"2002:7f00:1::": true, "2002:a9fe:a9fe::1": true, "2002:c0a8:101:1::1": true, "2002:a00:1::": true, // 6to4
		"2001:0:4136:e378:8000:63bf:80ff:fffe": true, // Teredo, client 127.0.0.1
		"2001:0:a00:1:8000:63bf:f7f7:f7f7":     true, // Teredo, server 10.0.0.1
		// Public.
		"8.8.8.8": false, "93.184.216.34": false, "1.1.1.1": false, "100.128.0.1": false, "172.32.0.1": false,
		"2606:4700::1111": false, "2a00:1450:4001::200e": false, "::ffff:8.8.8.8": false, "64:ff9b::808:808": false,
		"2002:808:808::1": false, "2001:0:4136:e378:8000:63bf:f7f7:f7f7": false,
	} {
		if got := NonPublic(netip.MustParseAddr(addr)); got != want {
			t.Errorf("%s: %v, want %v", addr, got, want)
		}
	}
	for _, blocked := range []string{"127.0.0.1:443", "[::1]:80", "[::127.0.0.1]:443", "[2002:7f00:1::]:80", "169.254.169.254:80"} {
		if err := guardedControl("tcp", blocked, nil); !errors.Is(err, ErrBlockedAddress) {
			t.Errorf("dial %s allowed: %v", blocked, err)
		}
	}
	if err := guardedControl("tcp4", "93.184.216.34:443", nil); err != nil {
		t.Fatal(err)
	}
}

// The subscriber looks an escrow's category up only for events that
// announce something: an edit or a fee change of a categorised escrow
// costs no read-model query.
func TestSubscriberLooksCategoriesUpOnlyForMessages(t *testing.T) {
	lookups := 0
	s := &Subscriber{Category: func(context.Context, string) (*view.Category, error) {
		lookups++
		return &view.Category{ID: "cat1", Name: "Phones"}, nil
	}}
	c := created()
	c.Terms.CategoryID = "cat1"
	edit := escrow.Edited{Terms: c.Terms, Fee: c.Fee, Quantity: 1, At: t0}
	edit.Terms.Purpose = "Tablet"
	var events []eventstore.RecordedEvent
	for i, ev := range []domain.Event{c, edit, escrow.AdditionalFeeSet{AdditionalFee: 500, At: t0}} {
		data, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, eventstore.RecordedEvent{ID: uuid.New(), Stream: "escrow-esc1", Revision: uint64(i),
			Type: ev.EventType(), Data: data, RecordedAt: t0})
	}
	msgs, err := s.Messages(context.Background(), events)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 1 || msgs[0].Event != EventEscrowCreated || lookups != 1 {
		t.Fatalf("%d messages (%v), %d category lookups; want escrow.created only, 1 lookup", len(msgs), msgs, lookups)
	}
}
