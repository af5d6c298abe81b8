package webhooks

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// slowLaneDispatcher is a dispatcher's lease bookkeeping without a pool:
// PerMerchant 4, SlowPerMerchant 1, SlowShare 2.
func slowLaneDispatcher() *Dispatcher {
	return &Dispatcher{PerMerchant: 4, SlowPerMerchant: 1, SlowShare: 2, adm: newAdmission(0, 4, 1, 2)}
}

// roomsOf is what a lease whose window holds merchants ms, each with more
// rows than any cap, may give each of them (allotment.rooms).
func roomsOf(d *Dispatcher, ms ...string) map[string]int {
	rows := map[string]int{}
	for _, m := range ms {
		rows[m] = d.PerMerchant + 1
	}
	return d.adm.allot().rooms(rows)
}

// TestAllotmentSlowLane: what the lease may still give each merchant. A
// prompt merchant has room up to PerMerchant; one never seen answering up
// to SlowPerMerchant; slow merchants share SlowShare between them, counting
// the attempts they already hold, so dead receivers that already hold the
// slow share get nothing more. Merchants in flight with no room are known
// before the window is read: the lease leaves their rows out.
func TestAllotmentSlowLane(t *testing.T) {
	d := slowLaneDispatcher()
	d.adm.busy = map[string]int{"slowA": 2, "prompt": 1, "unknownBusy": 1}
	d.setSlow("slowA", true)
	d.setSlow("slowB", true)
	d.setSlow("prompt", false)
	want := map[string]int{
		"slowA":       0, // holds the whole slow share already
		"slowB":       0, // idle, but the slow share is taken
		"prompt":      3, // PerMerchant 4, one in flight
		"unknownBusy": 0, // SlowPerMerchant 1, one in flight
		"unknownIdle": 1, // SlowPerMerchant
	}
	rooms := roomsOf(d, slices.Collect(maps.Keys(want))...)
	for m, w := range want {
		if rooms[m] != w {
			t.Errorf("%s: room %d, want %d (rooms %v)", m, rooms[m], w, rooms)
		}
	}
	full := d.adm.allot().full
	slices.Sort(full)
	if !slices.Equal(full, []string{"slowA", "unknownBusy"}) {
		t.Errorf("full before the window: %v, want slowA and unknownBusy", full)
	}

	// Share left over: one slow attempt in flight of a share of two leaves
	// room for exactly one more among the idle slow merchants.
	d = slowLaneDispatcher()
	d.adm.busy = map[string]int{"slowA": 1}
	for _, m := range []string{"slowA", "slowB", "slowC"} {
		d.setSlow(m, true)
	}
	rooms = roomsOf(d, "slowA", "slowB", "slowC")
	if a, bc := rooms["slowA"], rooms["slowB"]+rooms["slowC"]; a != 0 || bc != 1 {
		t.Fatalf("slowA room %d, slowB+slowC room %d; want 0 and 1 (rooms %v)", a, bc, rooms)
	}

	// A slow merchant in flight below its own cap has no room either once
	// the slow merchants hold the whole share: its rows are left out from
	// the start, not read to be found without room.
	d = slowLaneDispatcher()
	d.SlowPerMerchant, d.adm.slowPerMerchant = 2, 2
	d.adm.busy = map[string]int{"slowA": 1, "slowB": 1}
	d.setSlow("slowA", true)
	d.setSlow("slowB", true)
	full = d.adm.allot().full
	slices.Sort(full)
	if !slices.Equal(full, []string{"slowA", "slowB"}) {
		t.Fatalf("slow share used up: full %v, want slowA and slowB", full)
	}

	// A slow merchant that answers in time again is prompt, not slow.
	d = slowLaneDispatcher()
	d.setSlow("m", true)
	d.setSlow("m", false)
	if d.adm.slow["m"] || !d.adm.prompt["m"] {
		t.Fatalf("after answering in time: slow %v, prompt %v", d.adm.slow, d.adm.prompt)
	}
	if got := roomsOf(d, "m")["m"]; got != 4 {
		t.Fatalf("prompt again: room %d, want PerMerchant 4", got)
	}
	d.setSlow("m", true)
	if !d.adm.slow["m"] || d.adm.prompt["m"] {
		t.Fatalf("slow again: slow %v, prompt %v", d.adm.slow, d.adm.prompt)
	}
}

// TestAllotmentSlowShareBound: whatever the slow merchants already hold,
// the lease never lets them together exceed SlowShare (unless they already
// do), nor any of them SlowPerMerchant, nor gives one more than its rows
// in the window; the share is not left unused while a slow merchant below
// its cap has rows.
func TestAllotmentSlowShareBound(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		d := &Dispatcher{PerMerchant: 1 + r.IntN(5), SlowShare: 1 + r.IntN(6)}
		d.SlowPerMerchant = 1 + r.IntN(d.PerMerchant)
		d.adm = newAdmission(0, d.PerMerchant, d.SlowPerMerchant, d.SlowShare)
		held := 0
		rows := map[string]int{}
		for j := range 1 + r.IntN(6) {
			m := fmt.Sprintf("slow%d", j)
			d.setSlow(m, true)
			rows[m] = 1 + r.IntN(3)
			if n := r.IntN(d.SlowPerMerchant + 2); n > 0 {
				d.adm.busy[m] = n
				held += n
			}
		}
		// Rounds as a lease's selects bring them: each merchant once.
		a := d.adm.allot()
		rooms := map[string]int{}
		for m, n := range rows {
			maps.Copy(rooms, a.rooms(map[string]int{m: n}))
		}
		granted, wanted := 0, 0
		for m := range d.adm.slow {
			room := rooms[m]
			if room > max(d.SlowPerMerchant-d.adm.busy[m], 0) || room > rows[m] {
				t.Fatalf("case %d: %s holds %d with %d rows, room %d over SlowPerMerchant %d or its rows", i, m, d.adm.busy[m], rows[m], room, d.SlowPerMerchant)
			}
			granted += room
			wanted += min(max(d.SlowPerMerchant-d.adm.busy[m], 0), rows[m])
		}
		if held+granted > max(d.SlowShare, held) {
			t.Fatalf("case %d: slow merchants hold %d and may get %d more, SlowShare %d (busy %v, rooms %v)",
				i, held, granted, d.SlowShare, d.adm.busy, rooms)
		}
		if granted < min(max(d.SlowShare-held, 0), wanted) {
			t.Fatalf("case %d: share %d, %d held, %d wanted, yet only %d granted (busy %v, rows %v, rooms %v)",
				i, d.SlowShare, held, wanted, granted, d.adm.busy, rows, rooms)
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
	if n := len(d.adm.slow) + len(d.adm.prompt); n != maxRemembered {
		t.Fatalf("%d remembered, want %d", n, maxRemembered)
	}
	d.setSlow("newest", true)
	if n := len(d.adm.slow) + len(d.adm.prompt); n != 1 || !d.adm.slow["newest"] {
		t.Fatalf("past the bound: %d slow, %d prompt; want only the newest, slow", len(d.adm.slow), len(d.adm.prompt))
	}
}

// TestAttemptEndFreesRoom: which ends of attempts wake the dispatcher
// besides a full lease's: those that give a merchant at its cap room, those
// of slow merchants (the slow share), and answers in time that raise a
// merchant's cap to PerMerchant; not those of a merchant still below its
// cap.
func TestAttemptEndFreesRoom(t *testing.T) {
	d := slowLaneDispatcher()
	d.SlowPerMerchant, d.adm.slowPerMerchant = 2, 2 // PerMerchant 4, SlowShare 2
	if !d.setSlow("prompt", false) || d.setSlow("prompt", false) {
		t.Fatal("answering in time must raise the cap of a merchant not known to, and only then")
	}
	d.setSlow("slow", true)
	if !d.setSlow("slow", false) || d.setSlow("slow", true) {
		t.Fatal("a slow merchant answering in time gets PerMerchant back; turning slow raises nothing")
	}
	d.setSlow("slowBelowCap", true)
	d.adm.busy = map[string]int{"prompt": 3, "promptFull": 4, "unknown": 1, "unknownFull": 2, "slowBelowCap": 1}
	d.setSlow("promptFull", false)
	for m, want := range map[string]bool{
		"prompt": false, "promptFull": true, "unknown": false, "unknownFull": true,
		"slowBelowCap": true, // below its own cap, but the slow share may have run out
	} {
		if got := d.adm.freesRoom(m); got != want {
			t.Errorf("%s with %d in flight: freesRoom %v, want %v", m, d.adm.busy[m], got, want)
		}
	}
}
