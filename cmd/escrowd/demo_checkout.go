package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/checkout"
	"github.com/escrowd/escrowd/domain/customer"
	"github.com/escrowd/escrowd/domain/escrow"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/internal/app"
)

// demoCheckout is what `escrowd demo` keeps (in demo-checkout.json) to
// show the same checkout link on every run while it is open.
type demoCheckout struct {
	BuyerID   string `json:"buyerId"`
	SessionID string `json:"sessionId"`
}

// demoCheckoutLink returns a hosted checkout link for a demo escrow of the
// demo merchant, paid by a demo buyer whose test wallet covers it: open it
// in a browser and pay. A session that is no longer open (paid, cancelled,
// expired) is replaced by a new escrow and session.
func demoCheckoutLink(ctx context.Context, cfg Config, env *cliEnv, merchantID string) (string, error) {
	path := filepath.Join(cfg.DataDir, "demo-checkout.json")
	var kept demoCheckout
	if b, err := os.ReadFile(path); err == nil {
		if err := json.Unmarshal(b, &kept); err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
	}
	svc := service(env)
	link := func(id string) string { return cfg.PublicURL + "/checkout/" + id }
	if kept.SessionID != "" {
		st, err := svc.Checkout(ctx, kept.SessionID)
		if err == nil && st.StatusAt(svc.Engine.Now()) == checkout.Open {
			return link(st.ID), nil
		}
	}
	a := app.Actor{MerchantID: merchantID, Environment: domain.Test}
	if kept.BuyerID == "" {
		id, pos, err := svc.CreateCustomer(ctx, a, customer.NewCustomer{Firstname: "Demo", Lastname: "Buyer",
			Email: "demo.buyer@example.com", Phone: "08030000001"})
		if err != nil {
			return "", err
		}
		if err := publish(ctx, env, pos); err != nil {
			return "", err
		}
		kept.BuyerID = id
	}
	// A wallet top-up is allowed once a day: a refused one leaves what the
	// last one left, which the demo escrow's 10,250 due may still fit in.
	if _, pos, err := svc.TopUp(ctx, a, kept.BuyerID, money.Naira(50_000)); err == nil {
		if err := publish(ctx, env, pos); err != nil {
			return "", err
		}
	}
	days := 3
	e, err := svc.CreateEscrow(ctx, a, "", escrow.Draft{Amount: money.Naira(10_000), Purpose: "Demo: a pair of sneakers",
		Description: "Size 42, white. Paid into escrow; released when you confirm delivery.", WhoPays: string(escrow.Buyer),
		MaxDelivery: &days, DeliveryTimeline: "days"})
	if err != nil {
		return "", err
	}
	if err := publish(ctx, env, e.Position); err != nil {
		return "", err
	}
	s, err := svc.OpenCheckout(ctx, a, app.CheckoutRequest{EscrowID: e.Escrow.ID, CustomerID: kept.BuyerID,
		ExpiresInMinutes: checkout.MaxMinutes})
	if err != nil {
		return "", err
	}
	kept.SessionID = s.Session.ID
	b, _ := json.MarshalIndent(kept, "", "  ")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return "", err
	}
	return link(s.Session.ID), nil
}
