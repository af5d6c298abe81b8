package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/customer"
	"github.com/escrowd/escrowd/domain/merchant"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/pgtest"
	"github.com/escrowd/escrowd/webhooks"
)

// compatHit is what a receiver written for the public escrow API checks.
type compatHit struct {
	event, service, payluk, agent string
	body                          []byte
}

// TestCompatProfileSwitchesWebhookConventions: `merchant create --compat
// payluk` makes the merchant's deliveries carry x-payluk-signature beside
// x-service-signature, the public API's User-Agent, and a signature made
// with its super-admin key of the environment; `set-compat none` switches
// the headers back in one step (the secret stays), and `set-compat payluk`
// on a merchant created without it issues the super-admin keys it signs
// with. A running webhook server sees each switch at once.
func TestCompatProfileSwitchesWebhookConventions(t *testing.T) {
	db := pgtest.NewURL(t)
	var (
		mu   sync.Mutex
		hits []compatHit
	)
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var env webhooks.Envelope
		_ = json.Unmarshal(body, &env)
		mu.Lock()
		hits = append(hits, compatHit{event: env.Event, service: r.Header.Get("x-service-signature"),
			payluk: r.Header.Get("x-payluk-signature"), agent: r.UserAgent(), body: body})
		mu.Unlock()
	}))
	defer rc.Close()
	t.Setenv("ESCROW_WEBHOOK_ALLOW_PRIVATE", "true") // the receiver is on loopback

	out, err := cli(t, db, "merchant", "create", "--name", "Migrating", "--compat", "payluk", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var m app.CreatedMerchant
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatal(err)
	}
	saKey := map[domain.Environment]string{}
	for _, k := range m.Keys {
		if k.Role == merchant.SuperAdmin {
			saKey[k.Environment] = k.Key
		}
	}
	if m.Compat != merchant.ProfilePayluk || m.SigningSecrets[domain.Test] != saKey[domain.Test] || m.SigningSecrets[domain.Live] != saKey[domain.Live] {
		t.Fatalf("created %s", out)
	}
	plain, err := cli(t, db, "merchant", "create", "--name", "Plain", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var p app.CreatedMerchant
	if err := json.Unmarshal([]byte(plain), &p); err != nil {
		t.Fatal(err)
	}
	if p.Compat != merchant.ProfileNone {
		t.Fatalf("plain merchant %s", plain)
	}
	for _, id := range []string{m.MerchantID, p.MerchantID} {
		if _, err := cli(t, db, "merchant", "set-webhook", "--merchant", id, "--env", "test", "--url", rc.URL+"/hooks"); err != nil {
			t.Fatal(err)
		}
	}

	env := serveWebhooks(t, db)
	n := 0
	// deposit tops up a new customer of merchantID and returns the
	// delivery of its payment.deposit.success.
	deposit := func(merchantID string) compatHit {
		t.Helper()
		n++
		svc := service(env)
		a := app.Actor{MerchantID: merchantID, Environment: domain.Test}
		cid, _, err := svc.CreateCustomer(context.Background(), a, customer.NewCustomer{Firstname: "Ada", Lastname: "Obi",
			Email: fmt.Sprintf("ada%d@example.com", n), Phone: fmt.Sprintf("080312345%02d", n)})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := svc.TopUp(context.Background(), a, cid, money.Naira(5000)); err != nil {
			t.Fatal(err)
		}
		var got compatHit
		waitUntil(t, "the deposit webhook", func() bool {
			mu.Lock()
			defer mu.Unlock()
			for _, h := range hits {
				if h.event == "payment.deposit.success" && strings.Contains(string(h.body), cid) {
					got = h
					return true
				}
			}
			return false
		})
		return got
	}

	got := deposit(m.MerchantID)
	if got.payluk == "" || got.payluk != got.service || !webhooks.Verify(saKey[domain.Test], got.body, got.payluk) ||
		got.agent != webhooks.PaylukUserAgent {
		t.Fatalf("payluk profile delivery: %+v", got)
	}

	// Back to the service's own conventions: the secret stays.
	if out, err := cli(t, db, "merchant", "set-compat", "--merchant", m.MerchantID, "none"); err != nil || out != "compat none\n" {
		t.Fatalf("set-compat none: %q %v", out, err)
	}
	got = deposit(m.MerchantID)
	if got.payluk != "" || !webhooks.Verify(saKey[domain.Test], got.body, got.service) || got.agent != webhooks.UserAgent {
		t.Fatalf("after set-compat none: %+v", got)
	}

	// A merchant created without the profile: set-compat issues the
	// super-admin keys it then signs with.
	got = deposit(p.MerchantID)
	if got.payluk != "" || !webhooks.Verify(p.SigningSecrets[domain.Test], got.body, got.service) {
		t.Fatalf("plain merchant delivery: %+v", got)
	}
	out, err = cli(t, db, "merchant", "set-compat", "--merchant", p.MerchantID, "--json", "payluk")
	if err != nil {
		t.Fatal(err)
	}
	var change app.CompatChange
	if err := json.Unmarshal([]byte(out), &change); err != nil {
		t.Fatal(err)
	}
	issued := map[domain.Environment]string{}
	for _, k := range change.Keys {
		if k.Role != merchant.SuperAdmin || !strings.HasPrefix(k.Key, "sk_"+string(k.Environment)+"_") {
			t.Fatalf("issued %+v", k)
		}
		issued[k.Environment] = k.Key
	}
	if change.Compat != merchant.ProfilePayluk || len(issued) != 2 {
		t.Fatalf("set-compat payluk printed %s", out)
	}
	got = deposit(p.MerchantID)
	if got.payluk != got.service || !webhooks.Verify(issued[domain.Test], got.body, got.payluk) || got.agent != webhooks.PaylukUserAgent {
		t.Fatalf("after set-compat payluk: %+v", got)
	}
	// The switch is a merchant event, as every operator change is.
	evs, err := env.Store.ReadStream(context.Background(), app.MerchantKind.StreamName(p.MerchantID), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if last := evs[len(evs)-1]; last.Type != "merchant.compat_set" {
		t.Fatalf("last merchant event %s", last.Type)
	}

	for _, bad := range [][]string{
		{"merchant", "set-compat", "--merchant", p.MerchantID, "stripe"},
		{"merchant", "set-compat", "--merchant", p.MerchantID},
		{"merchant", "create", "--name", "X", "--compat", "stripe"},
	} {
		if _, err := cli(t, db, bad...); err == nil || !strings.Contains(err.Error(), "payluk or none") {
			t.Fatalf("%v: %v", bad, err)
		}
	}
}
