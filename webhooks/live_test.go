package webhooks

import (
	"context"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/eventstore/postgres"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/pgtest"
)

// TestLiveMessagesSignedWithLiveSecret: each environment's messages are
// signed with that environment's secret, never the other's.
func TestLiveMessagesSignedWithLiveSecret(t *testing.T) {
	e := newTestEnv(t)
	var m app.CreatedMerchant
	live := newTLSReceiver(t, func() string { return m.SigningSecrets[domain.Live] }, nil)
	test := newReceiver(t, func() string { return m.SigningSecrets[domain.Test] }, nil)
	m = e.merchant(test.srv.URL)
	if m.SigningSecrets[domain.Live] == "" || m.SigningSecrets[domain.Live] == m.SigningSecrets[domain.Test] {
		t.Fatalf("secrets %v", m.SigningSecrets)
	}
	e.setURL(m.MerchantID, domain.Live, live.srv.URL) // https://127.0.0.1:port
	e.runSubscriber(e.pool)
	// The live client trusts the receiver's certificate and, like
	// ESCROW_WEBHOOK_ALLOW_PRIVATE, lets it reach loopback.
	e.runDispatcher(e.pool, func(d *Dispatcher) { d.LiveClient = live.srv.Client() })
	liveID := e.depositsIn(m.MerchantID, domain.Live, 1)[0].String()
	testID := e.deposits(m.MerchantID, 1)[0].String()
	eventually(t, 10*time.Second, "both delivered", func() bool { return e.statuses()[StatusDelivered] == 2 })

	lh, th := live.all(), test.all()
	if len(lh) != 1 || lh[0].ID != liveID || len(th) != 1 || th[0].ID != testID {
		t.Fatalf("live receiver %+v, test receiver %+v", lh, th)
	}
	if !lh[0].SigOK || Verify(m.SigningSecrets[domain.Test], lh[0].Body, lh[0].Sig) {
		t.Fatal("the live message is not signed with the live secret alone")
	}
	if lh[0].Sig != Sign(m.SigningSecrets[domain.Live], lh[0].Body) {
		t.Fatalf("live signature %q is not the hex HMAC-SHA512 of the body with the live secret", lh[0].Sig)
	}
	if !th[0].SigOK || Verify(m.SigningSecrets[domain.Live], th[0].Body, th[0].Sig) {
		t.Fatal("the test message is not signed with the test secret alone")
	}
	if !strings.Contains(string(lh[0].Body), `"environment":"live"`) {
		t.Fatalf("live body %s", lh[0].Body)
	}
}

// TestAllowPrivateHelperProcess is a dispatcher with AllowPrivate and its
// default HTTP clients, run by TestAllowPrivateDeliversLiveToLoopback in a
// child process whose trusted roots (SSL_CERT_FILE) hold the receiver's
// certificate.
func TestAllowPrivateHelperProcess(t *testing.T) {
	url := os.Getenv("WEBHOOKS_ALLOW_PRIVATE_HELPER_DB")
	if url == "" {
		t.Skip("child process of TestAllowPrivateDeliversLiveToLoopback")
	}
	pool := pgtest.OpenPool(t, url)
	store := postgres.New(pool)
	d := &Dispatcher{Pool: pool, Endpoints: endpointsOf(store), AllowPrivate: true,
		PollInterval: 20 * time.Millisecond, Schedule: fastSchedule}
	_ = d.Run(context.Background()) // until killed
}

// TestAllowPrivateDeliversLiveToLoopback: with AllowPrivate (the operator's
// ESCROW_WEBHOOK_ALLOW_PRIVATE), the dispatcher's own live client reaches a
// live callback on a loopback address, which it refuses by default
// (TestLiveDeliveryRefusesPrivateAddresses).
func TestAllowPrivateDeliversLiveToLoopback(t *testing.T) {
	e := newTestEnv(t)
	var m app.CreatedMerchant
	rc := newTLSReceiver(t, func() string { return m.SigningSecrets[domain.Live] }, nil)
	m = e.merchant("")
	e.setURL(m.MerchantID, domain.Live, rc.srv.URL)
	roots := filepath.Join(t.TempDir(), "roots.pem")
	if err := os.WriteFile(roots, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: rc.srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	e.runSubscriber(e.pool)
	child := exec.Command(os.Args[0], "-test.run=^TestAllowPrivateHelperProcess$")
	child.Env = append(os.Environ(), "WEBHOOKS_ALLOW_PRIVATE_HELPER_DB="+e.url, "SSL_CERT_FILE="+roots, "SSL_CERT_DIR="+t.TempDir())
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	id := e.depositsIn(m.MerchantID, domain.Live, 1)[0].String()
	eventually(t, 20*time.Second, "the live message delivered", func() bool { return rc.delivered()[id] == 1 })
	hits := rc.all()
	if len(hits) != 1 || !hits[0].SigOK || hits[0].Attempt != "1" {
		t.Fatalf("hits %+v", hits)
	}
	eventually(t, 10*time.Second, "the delivery recorded", func() bool {
		d, err := e.box.Get(context.Background(), m.MerchantID, domain.Live, id)
		return err == nil && d.Status == StatusDelivered
	})
	d, _ := e.box.Get(context.Background(), m.MerchantID, domain.Live, id)
	if d.Attempts != 1 || d.LastStatusCode == nil || *d.LastStatusCode != 200 || d.LastError != nil {
		t.Fatalf("delivery %+v", d)
	}
}
