package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/pgtest"
)

// A real `escrowd serve` releases an auto-release escrow with a one-minute
// window by itself, on the wall clock, once the minute after payment has
// passed: COMPLETED by the system, the seller paid, nothing left held.
// It waits for the release (about a minute), so -short skips it.
func TestServeAutoReleasesAOneMinuteWindow(t *testing.T) {
	if testing.Short() {
		t.Skip("waits a real minute")
	}
	db := pgtest.NewURL(t)
	out, err := cli(t, db, "merchant", "create", "--name", "Clockwork", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Keys []struct{ Key, Environment, Role string } `json:"keys"`
	}
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	var sa, std string
	for _, k := range m.Keys {
		switch {
		case k.Environment == "test" && k.Role == "super_admin":
			sa = k.Key
		case k.Environment == "test" && k.Role == "standard":
			std = k.Key
		}
	}

	serve := exec.Command(os.Args[0], "-test.run=^TestEscrowdProcess$", "--", "serve", "--addr", "127.0.0.1:0")
	serve.Env = append(os.Environ(), "ESCROWD_TEST_PROCESS=1", "DATABASE_URL="+db, "ESCROW_DATA_DIR="+t.TempDir(),
		"ESCROW_LOG_FORMAT=json", "ESCROW_RATE_LIMIT_PER_MINUTE=0", "ESCROW_DEADLINES_INTERVAL=1s", "ESCROW_DEADLINES_LEASE=10s")
	var logged syncBuffer
	serve.Stderr = &logged
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = serve.Process.Signal(syscall.SIGTERM)
		_ = serve.Wait()
	}()
	listening := regexp.MustCompile(`"msg":"listening","addr":"(127\.0\.0\.1:\d+)"`)
	waitUntil(t, "serve listening", func() bool { return listening.MatchString(logged.String()) })
	api := "http://" + listening.FindStringSubmatch(logged.String())[1]

	call := func(method, path, key, cid, body string) map[string]any {
		t.Helper()
		req, err := http.NewRequest(method, api+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		if cid != "" {
			req.Header.Set("customer-id", cid)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		raw, _ := io.ReadAll(res.Body)
		var env struct {
			Data map[string]any `json:"data"`
		}
		if err := json.Unmarshal(raw, &env); err != nil || res.StatusCode/100 != 2 {
			t.Fatalf("%s %s: %d %s (%v)", method, path, res.StatusCode, raw, err)
		}
		return env.Data
	}
	customer := func(email, phone string) string {
		return call("POST", "/v1/customer/create", sa, "",
			fmt.Sprintf(`{"firstname":"Ada","lastname":"Obi","email":%q,"phone":%q}`, email, phone))["customerId"].(string)
	}
	seller, buyer := customer("s@x.co", "08035550001"), customer("b@x.co", "08035550002")
	call("POST", "/v1/payment/topup", std, buyer, `{"amount":10250}`)
	e := call("POST", "/v1/escrow/create", std, seller,
		`{"amount":10000,"purpose":"Phone","whoPays":"buyer","maxDelivery":1,"deliveryTimeline":"minutes","autoRelease":true}`)
	id, token := e["id"].(string), e["paymentToken"].(string)
	call("POST", "/v1/payment/escrow", std, buyer,
		`{"amount":10250,"reference":"clock-1","transactionType":"escrow","gateway":"wallet","escrowDetails":{"escrowId":"`+id+`"}}`)
	v := call("GET", "/v1/escrow/verify/"+token, std, "", "")
	dl, _ := v["nextDeadline"].(map[string]any)
	if v["status"] != "ONGOING" || dl == nil || dl["type"] != "auto_release" {
		t.Fatalf("paid escrow %v", v)
	}
	releaseAt, err := time.Parse(time.RFC3339Nano, dl["at"].(string))
	if err != nil {
		t.Fatal(err)
	}

	// The release: the scheduler's round after the minute, then the
	// projectors. Waited for, with room for a loaded machine.
	deadline := releaseAt.Add(2 * time.Minute)
	for v["status"] == "ONGOING" {
		if time.Now().After(deadline) {
			t.Fatalf("still ONGOING two minutes after its window: %v\n%s", v, logged.String())
		}
		time.Sleep(time.Second)
		v = call("GET", "/v1/escrow/verify/"+token, std, "", "")
	}
	completedAt, err := time.Parse(time.RFC3339Nano, fmt.Sprint(v["completedAt"]))
	if v["status"] != "COMPLETED" || v["nextDeadline"] != nil || err != nil || completedAt.Before(releaseAt) {
		t.Fatalf("after the window: %v (release due %s)", v, releaseAt)
	}
	w := call("GET", "/v1/wallet", std, seller, "")
	if fmt.Sprint(w["mainBalance"]) != "10000" || fmt.Sprint(w["escrowBalance"]) != "0" {
		t.Fatalf("seller's wallet %v", w)
	}
	if w = call("GET", "/v1/wallet", std, buyer, ""); fmt.Sprint(w["escrowBalance"]) != "0" {
		t.Fatalf("buyer's wallet %v", w)
	}
	// Released once, by the system.
	evs, err := testEnv(t, db).Store.ReadStream(context.Background(), "escrow-"+id, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var releases []string
	for _, re := range evs {
		if re.Type == "escrow.released" {
			var meta domain.Meta
			if err := json.Unmarshal(re.Metadata, &meta); err != nil {
				t.Fatal(err)
			}
			releases = append(releases, meta.Actor)
		}
	}
	if len(releases) != 1 || releases[0] != app.SystemAgent {
		t.Fatalf("releases by %v, want one by %s", releases, app.SystemAgent)
	}
}
