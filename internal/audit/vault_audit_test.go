package audit_test

import (
	"testing"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/escrow"
	"github.com/escrowd/escrowd/domain/money"
)

// TestAuditVaults audits real vault money: stakes locked, a vault won, one
// cancelled with odd fee shares, one left open; the wallets, records and
// balances the audit replays agree with the read models, and commission
// is charged once per vault.
func TestAuditVaults(t *testing.T) {
	e := newEnv(t)
	m := e.merchant("Shop")
	a := actor(m, domain.Test)
	var ids []string
	for i, phone := range []string{"08037771001", "08037771002", "08037771003"} {
		ids = append(ids, e.customer(a, string(rune('a'+i))+"@x.com", phone))
		e.topUp(a, ids[i], 10000)
	}
	vault := func(naira ...int64) escrow.State {
		t.Helper()
		d := escrow.VaultDraft{Purpose: "pool"}
		for i, n := range naira {
			d.Participants = append(d.Participants, escrow.Stake{CustomerID: ids[i], Amount: money.Naira(n)})
		}
		res, err := e.svc.CreateVault(e.ctx, a, d)
		if err != nil {
			t.Fatal(err)
		}
		e.wrote(res.Position)
		return res.Escrow
	}
	won, cancelled := vault(1000, 2000, 3000), vault(500, 500, 500)
	vault(700, 300) // left open: its stakes stay in escrow
	res, err := e.svc.DeclareVaultWinner(e.ctx, a, won.ID, ids[2])
	if err != nil {
		t.Fatal(err)
	}
	e.wrote(res.Position)
	if res, err = e.svc.CancelVault(e.ctx, a, cancelled.ID); err != nil {
		t.Fatal(err)
	}
	e.wrote(res.Position)
	expectClean(t, e.audit(m))
}
