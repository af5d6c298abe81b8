package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kurrent-io/KurrentDB-Client-Go/kurrentdb"
)

// TestKurrentClusterBlockRuns: docs/kurrentdb.md's cluster block configures
// what it says, read by the same parser the adapter opens the store with:
// three TLS nodes seeded for gossip, the CA file as the trust root, leader
// reads, and the discovery form naming its DNS cluster. Nothing is dialled:
// the nodes' names are the document's, not this machine's.
func TestKurrentClusterBlockRuns(t *testing.T) {
	raw, err := os.ReadFile("../../docs/kurrentdb.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(raw), "## Running on a KurrentDB cluster")
	if !ok {
		t.Fatal("docs/kurrentdb.md has no section on running on a cluster")
	}
	_, block, _ := strings.Cut(section, "```sh\n")
	block, _, _ = strings.Cut(block, "```")

	ca := filepath.Join(t.TempDir(), "kurrent-ca.crt")
	writeTestCA(t, ca)
	vars := map[string][]string{}
	var last string
	for _, l := range strings.Split(block, "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "# export ") { // an alternative, commented out
			l = strings.TrimPrefix(l, "# ")
		}
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		last = l
		kv, ok := strings.CutPrefix(l, "export ")
		if !ok {
			continue
		}
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = append(vars[k], strings.Trim(v, `'"`))
	}
	if last != "escrowd serve" {
		t.Fatalf("the block ends with %q, not the server", last)
	}
	if got := vars["ESCROW_EVENT_STORE"]; len(got) != 1 || got[0] != "kurrent" {
		t.Fatalf("ESCROW_EVENT_STORE %q", got)
	}
	t.Setenv("ESCROW_EVENT_STORE", "kurrent")
	t.Setenv("DATABASE_URL", "postgres://127.0.0.1:1/unused") // read, never dialled
	urls := vars["KURRENTDB_URL"]
	if len(urls) != 2 {
		t.Fatalf("want the node list and the discovery form, got %q", urls)
	}
	for i, u := range urls {
		if !strings.Contains(u, "tlsCAFile=/etc/escrowd/kurrent-ca.crt") {
			t.Fatalf("URL %d names another CA file: %s", i, u)
		}
		t.Setenv("KURRENTDB_URL", u)
		c, err := LoadConfig()
		if err != nil || c.EventStore != "kurrent" || c.KurrentURL != u {
			t.Fatalf("config of URL %d: %+v, %v", i, c, err)
		}
		cfg, err := kurrentdb.ParseConnectionString(strings.Replace(u, "/etc/escrowd/kurrent-ca.crt", ca, 1))
		if err != nil {
			t.Fatalf("URL %d: %v", i, err)
		}
		if cfg.DisableTLS || cfg.SkipCertificateVerification || cfg.RootCAs == nil {
			t.Errorf("URL %d: TLS off or unverified: %+v", i, cfg)
		}
		if cfg.NodePreference != kurrentdb.NodePreferenceLeader || cfg.Username != "admin" {
			t.Errorf("URL %d: node preference %v, user %q", i, cfg.NodePreference, cfg.Username)
		}
		switch i {
		case 0:
			var seeds []string
			for _, s := range cfg.GossipSeeds {
				seeds = append(seeds, s.String())
			}
			if strings.Join(seeds, ",") != "node1:2113,node2:2113,node3:2113" || cfg.DnsDiscover {
				t.Errorf("node list: seeds %q, discovery %v", seeds, cfg.DnsDiscover)
			}
		case 1:
			if !cfg.DnsDiscover || cfg.Address != "cluster.example.com:2113" {
				t.Errorf("discovery form: discovery %v, address %q", cfg.DnsDiscover, cfg.Address)
			}
		}
	}
}

// writeTestCA writes a self-signed CA certificate in PEM, as tlsCAFile reads.
func writeTestCA(t *testing.T, path string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
