package webhooks

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// slowLaneDispatcher is a dispatcher's claim bookkeeping without a pool:
// PerMerchant 4, SlowPerMerchant 1, SlowShare 2.
func slowLaneDispatcher() *Dispatcher {
	return &Dispatcher{PerMerchant: 4, SlowPerMerchant: 1, SlowShare: 2,
		busy: map[string]int{}, slow: map[string]bool{}, prompt: map[string]bool{}}
}

// claimRoom is how many more attempts claim (outbox.go) would give merchant
// m under load: SlowPerMerchant minus its load, never below 0.
func claimRoom(d *Dispatcher, load map[string]int, m string) int {
	return max(d.SlowPerMerchant-load[m], 0)
}

// TestClaimLoadSlowLane: what the claim may still give each merchant. A
// prompt merchant has room up to PerMerchant; one never seen answering up
// to SlowPerMerchant; slow merchants share SlowShare between them, counting
// the attempts they already hold, so dead receivers that already hold the
// slow share get nothing more.
func TestClaimLoadSlowLane(t *testing.T) {
	d := slowLaneDispatcher()
	d.busy = map[string]int{"slowA": 2, "prompt": 1, "unknownBusy": 1}
	d.setSlow("slowA", true)
	d.setSlow("slowB", true)
	d.setSlow("prompt", false)
	load := d.claimLoad()
	for m, want := range map[string]int{
		"slowA":       0, // holds the whole slow share already
		"slowB":       0, // idle, but the slow share is taken
		"prompt":      3, // PerMerchant 4, one in flight
		"unknownBusy": 0, // SlowPerMerchant 1, one in flight
		"unknownIdle": 1, // SlowPerMerchant
	} {
		if got := claimRoom(d, load, m); got != want {
			t.Errorf("%s: room %d, want %d (load %v)", m, got, want, load)
		}
	}

	// Share left over: one slow attempt in flight of a share of two leaves
	// room for exactly one more among the idle slow merchants.
	d = slowLaneDispatcher()
	d.busy = map[string]int{"slowA": 1}
	for _, m := range []string{"slowA", "slowB", "slowC"} {
		d.setSlow(m, true)
	}
	load = d.claimLoad()
	if a, bc := claimRoom(d, load, "slowA"), claimRoom(d, load, "slowB")+claimRoom(d, load, "slowC"); a != 0 || bc != 1 {
		t.Fatalf("slowA room %d, slowB+slowC room %d; want 0 and 1 (load %v)", a, bc, load)
	}

	// A slow merchant that answers in time again is prompt, not slow.
	d = slowLaneDispatcher()
	d.setSlow("m", true)
	d.setSlow("m", false)
	if d.slow["m"] || !d.prompt["m"] {
		t.Fatalf("after answering in time: slow %v, prompt %v", d.slow, d.prompt)
	}
	if got := claimRoom(d, d.claimLoad(), "m"); got != 4 {
		t.Fatalf("prompt again: room %d, want PerMerchant 4", got)
	}
	d.setSlow("m", true)
	if !d.slow["m"] || d.prompt["m"] {
		t.Fatalf("slow again: slow %v, prompt %v", d.slow, d.prompt)
	}
}

// TestClaimLoadSlowShareBound: whatever the slow merchants already hold,
// the claim never lets them together exceed SlowShare (unless they already
// do), nor any of them SlowPerMerchant.
func TestClaimLoadSlowShareBound(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		d := &Dispatcher{PerMerchant: 1 + r.IntN(5), SlowShare: 1 + r.IntN(6),
			busy: map[string]int{}, slow: map[string]bool{}, prompt: map[string]bool{}}
		d.SlowPerMerchant = 1 + r.IntN(d.PerMerchant)
		held := 0
		for j := range 1 + r.IntN(6) {
			m := fmt.Sprintf("slow%d", j)
			d.setSlow(m, true)
			if n := r.IntN(d.SlowPerMerchant + 2); n > 0 {
				d.busy[m] = n
				held += n
			}
		}
		load := d.claimLoad()
		granted := 0
		for m := range d.slow {
			room := claimRoom(d, load, m)
			if room > max(d.SlowPerMerchant-d.busy[m], 0) {
				t.Fatalf("case %d: %s holds %d, room %d over SlowPerMerchant %d", i, m, d.busy[m], room, d.SlowPerMerchant)
			}
			granted += room
		}
		if held+granted > max(d.SlowShare, held) {
			t.Fatalf("case %d: slow merchants hold %d and may get %d more, SlowShare %d (busy %v, load %v)",
				i, held, granted, d.SlowShare, d.busy, load)
		}
		if held < d.SlowShare && granted == 0 {
			// Some slow merchant below its cap must get the share left.
			for m := range d.slow {
				if d.busy[m] < d.SlowPerMerchant {
					t.Fatalf("case %d: share %d, %d held, yet %s (holding %d) gets nothing (load %v)", i, d.SlowShare, held, m, d.busy[m], load)
				}
			}
		}
	}
}

// The slow lane's defaults, as Dispatcher documents them: SlowAfter half
// the Timeout, SlowPerMerchant 2 but never more than PerMerchant, SlowShare
// a quarter of the workers and at least one; set values are kept.
func TestSlowLaneDefaults(t *testing.T) {
	d := &Dispatcher{}
	d.defaults()
	if d.SlowAfter != 5*time.Second || d.SlowPerMerchant != 2 || d.SlowShare != 16 {
		t.Fatalf("defaults: SlowAfter %s, SlowPerMerchant %d, SlowShare %d; want 5s, 2, 16 (Timeout %s, Workers %d)",
			d.SlowAfter, d.SlowPerMerchant, d.SlowShare, d.Timeout, d.Workers)
	}
	d = &Dispatcher{Timeout: 3 * time.Second, Workers: 3, PerMerchant: 1}
	d.defaults()
	if d.SlowAfter != 1500*time.Millisecond || d.SlowPerMerchant != 1 || d.SlowShare != 1 {
		t.Fatalf("small dispatcher: SlowAfter %s, SlowPerMerchant %d, SlowShare %d; want 1.5s, 1 (PerMerchant), 1",
			d.SlowAfter, d.SlowPerMerchant, d.SlowShare)
	}
	d = &Dispatcher{SlowAfter: time.Second, SlowPerMerchant: 3, SlowShare: 5, PerMerchant: 4}
	d.defaults()
	if d.SlowAfter != time.Second || d.SlowPerMerchant != 3 || d.SlowShare != 5 {
		t.Fatalf("set values: SlowAfter %s, SlowPerMerchant %d, SlowShare %d; want 1s, 3, 5", d.SlowAfter, d.SlowPerMerchant, d.SlowShare)
	}
}

// TestSlowLaneMemoryIsBounded: the merchants remembered as slow or prompt
// are at most maxRemembered; past it the memory starts over, with the
// newest merchant remembered.
func TestSlowLaneMemoryIsBounded(t *testing.T) {
	d := slowLaneDispatcher()
	for i := range maxRemembered {
		d.setSlow(fmt.Sprintf("m%d", i), i%2 == 0)
	}
	if n := len(d.slow) + len(d.prompt); n != maxRemembered {
		t.Fatalf("%d remembered, want %d", n, maxRemembered)
	}
	d.setSlow("newest", true)
	if n := len(d.slow) + len(d.prompt); n != 1 || !d.slow["newest"] {
		t.Fatalf("past the bound: %d slow, %d prompt; want only the newest, slow", len(d.slow), len(d.prompt))
	}
}
