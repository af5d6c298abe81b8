package main

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestPaystackSimCommand(t *testing.T) {
	if findCommand("paystack-sim") == nil {
		t.Fatal("paystack-sim is not a command")
	}
	const key = "sk_test_cli0123456789abcdef"
	ctx, cancel := context.WithCancel(context.Background())
	var out, errs syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- runPaystackSim(ctx, &out, &errs, paystackSimOptions{addr: "127.0.0.1:0", secret: key, settle: "manual"})
	}()
	urlRe := regexp.MustCompile(`on (http://127\.0\.0\.1:\d+) `)
	var base string
	for deadline := time.Now().Add(10 * time.Second); base == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if m := urlRe.FindStringSubmatch(out.String()); m != nil {
			base = m[1]
		}
	}
	if base == "" {
		t.Fatalf("no URL printed:\n%s%s", out.String(), errs.String())
	}
	if strings.Contains(out.String(), key) {
		t.Fatalf("the key is printed whole:\n%s", out.String())
	}
	req, _ := http.NewRequest(http.MethodGet, base+"/bank?currency=NGN", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"Guaranty Trust Bank"`) {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	for _, o := range []paystackSimOptions{
		{addr: "127.0.0.1:0"},
		{addr: "127.0.0.1:0", secret: "sk_live_0123456789abcdef"},
		{addr: "0.0.0.0:0", secret: key},
		{addr: "127.0.0.1:0", secret: key, webhook: "http://192.0.2.1/hooks/paystack/test"},
		{addr: "127.0.0.1:0", secret: key, settle: "sometimes"},
	} {
		if err := runPaystackSim(context.Background(), io.Discard, io.Discard, o); err == nil {
			t.Errorf("%+v: accepted", o)
		}
	}
}
