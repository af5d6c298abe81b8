// Admission: which attempts a dispatcher may start now, per merchant and in
// all, and what the slow merchants may share.

package webhooks

import (
	"maps"
	"math/rand/v2"
	"time"
)

// handOffQuiet is how long after a Subscriber's last request for room
// claims still leave it some. Past it the subscriber has stopped handing
// over (its runner lost the lock to another process, or nothing happens),
// and claims take every free worker again.
const handOffQuiet = 10 * time.Second

// handingOff reports whether a Subscriber asked for room within
// handOffQuiet; mu held.
func (d *Dispatcher) handingOff() bool {
	return !d.reservedAt.IsZero() && d.Now().Sub(d.reservedAt) < handOffQuiet
}

// claimPicked narrows what reserve leaves to the claim under way, once
// its window has chosen: the rows it picked, in all and per merchant, are
// all it will lease. Until then reserve left it its n and every room its
// window granted.
func (d *Dispatcher) claimPicked(picked map[string]int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, k := range picked {
		n += k
	}
	d.claimN, d.claimRooms = n, maps.Clone(picked)
}

// countOut takes one attempt of merchant m out of busy (its attempt
// ended, or its reservation will not be used). Callers hold d.mu.
func (d *Dispatcher) countOut(m string) {
	if d.busy[m]--; d.busy[m] <= 0 {
		delete(d.busy, m)
	}
}

// inFlight is the attempts in flight: the sum of busy, whose entries are
// at most Workers. Callers hold d.mu.
func (d *Dispatcher) inFlight() int {
	n := 0
	for _, k := range d.busy {
		n += k
	}
	return n
}

// allotment shares a claim's attempts out among the merchants of its
// window: a prompt merchant may have up to PerMerchant attempts in flight,
// any other up to SlowPerMerchant, and the slow ones all together up to
// SlowShare. It is asked only about merchants the window holds, so what a
// claim costs does not grow with the merchants the dispatcher remembers.
type allotment struct {
	d *Dispatcher
	// full are merchants in flight that may get nothing more, whatever the
	// window holds: the claim leaves their rows out from the start.
	full []string
	// share is what the slow merchants may still get together.
	share int
}

// allot starts the allotment of a claim. Callers hold d.mu.
func (d *Dispatcher) allot() *allotment {
	a := &allotment{d: d, share: d.SlowShare}
	for m, n := range d.busy {
		if d.slow[m] {
			a.share -= n
		}
	}
	for m, n := range d.busy {
		if n >= d.capOf(m) || d.slow[m] && a.share <= 0 {
			a.full = append(a.full, m)
		}
	}
	return a
}

// capOf is how many attempts merchant m may have in flight: PerMerchant
// once seen answering in time, SlowPerMerchant otherwise. Callers hold
// d.mu.
func (d *Dispatcher) capOf(m string) int {
	if d.prompt[m] {
		return d.PerMerchant
	}
	return d.SlowPerMerchant
}

// rooms returns how many more attempts each merchant of rows (merchants a
// claim's window shows for the first time, each with its rows there) may
// get: its cap less its attempts in flight, and for a slow merchant no
// more than its rows there nor than what is left of the share. The share
// goes to the slow merchants in random order, so that no slow merchant
// always comes last, and only as far as they have rows to take it. It
// takes d.mu.
func (a *allotment) rooms(rows map[string]int) map[string]int {
	d := a.d
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]int, len(rows))
	var slow []string
	for m := range rows {
		if d.slow[m] {
			slow = append(slow, m)
			continue
		}
		out[m] = max(d.capOf(m)-d.busy[m], 0)
		if d.claimRooms != nil {
			d.claimRooms[m] = out[m]
		}
	}
	rand.Shuffle(len(slow), func(i, j int) { slow[i], slow[j] = slow[j], slow[i] })
	for _, m := range slow {
		r := max(min(d.SlowPerMerchant-d.busy[m], rows[m], a.share), 0)
		out[m] = r
		a.share -= r
		if d.claimRooms != nil {
			d.claimRooms[m] = r
		}
	}
	return out
}

// freesRoom says whether the end of one of merchant m's attempts in flight
// gives back room a claim may have lacked: m's own, when m is at its cap,
// or the slow share, when m is slow (its attempts end seldom, and the
// share may have run out). Callers hold d.mu and have not yet counted the
// attempt out of busy.
func (d *Dispatcher) freesRoom(m string) bool {
	return d.slow[m] || d.busy[m] >= d.capOf(m)
}

// maxRemembered bounds the merchants remembered as slow or prompt; past it
// the memory starts over (every merchant is probed again: harmless).
const maxRemembered = 100_000

// setSlow records that a merchant's attempt ran past SlowAfter (slow) or
// answered within it; rose says its cap went up (it answered in time, and
// was not known to).
func (d *Dispatcher) setSlow(merchantID string, slow bool) (rose bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.slow)+len(d.prompt) >= maxRemembered {
		clear(d.slow)
		clear(d.prompt)
	}
	rose = !slow && !d.prompt[merchantID]
	if slow {
		d.slow[merchantID] = true
		delete(d.prompt, merchantID)
	} else {
		d.prompt[merchantID] = true
		delete(d.slow, merchantID)
	}
	return rose
}
