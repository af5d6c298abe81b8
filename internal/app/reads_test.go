package app

import (
	"context"
	"testing"

	"github.com/escrowd/escrowd/domain"
)

// Merchant reads the latest state from the log, whichever instance wrote
// it: the webhook dispatcher finds a URL set through another process's API
// at its next lookup.
func TestMerchantReadsTheLatestState(t *testing.T) {
	ctx := context.Background()
	a, b, _, actor := twoInstances(t)
	if m, err := b.Merchant(ctx, actor.MerchantID); err != nil || m.Webhooks[domain.Test] != "" {
		t.Fatalf("before: %v, %v", m.Webhooks, err)
	}
	if _, err := a.SetWebhookURL(ctx, actor, "https://shop.example/hooks"); err != nil {
		t.Fatal(err)
	}
	if m, err := b.Merchant(ctx, actor.MerchantID); err != nil || m.Webhooks[domain.Test] != "https://shop.example/hooks" {
		t.Fatalf("after: %v, %v", m.Webhooks, err)
	}
	if m, err := b.Merchant(ctx, "no-such-merchant"); err != nil || m.ID != "" {
		t.Fatalf("unknown merchant: %+v, %v", m, err)
	}
}
