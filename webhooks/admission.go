package webhooks

import (
	"maps"
	"math/rand/v2"
	"time"
)

// admission decides which attempts a dispatcher may start now: a prompt
// merchant (seen answering within SlowAfter) may have up to perMerchant
// attempts in flight, any other up to slowPerMerchant, the slow ones all
// together up to slowShare, and everything up to workers. It also knows
// what the lease under way may still lease, so that a Subscriber's
// reservation (reserve) takes room beside it, never from it.
//
// It is the dispatcher's bookkeeping only: no I/O, no goroutines, no
// clock and no lock. The Dispatcher's mu guards it, and the Dispatcher
// passes the time in; admission_test.go tests its decisions on their own.
type admission struct {
	workers, perMerchant, slowPerMerchant, slowShare int
	// shuffle orders the slow merchants of a window before the share goes
	// out to them.
	shuffle func([]string)

	busy   map[string]int  // attempts in flight per merchant (in all: inFlight)
	slow   map[string]bool // seen running past SlowAfter
	prompt map[string]bool // seen answering within SlowAfter
	// more: the last lease was cut short by free workers, or there were
	// none to lease with.
	more bool
	// leasing: a lease is under way, with the attempts in flight as they
	// were when it started.
	leasing bool
	// endedInLease: an attempt ended while the lease under way ran, which
	// counted it in flight.
	endedInLease bool
	// leaseN is how many attempts the lease under way may lease, and
	// leaseRooms what its window granted each merchant so far: reserve
	// leaves both to it.
	leaseN     int
	leaseRooms map[string]int
	// reservedAt is when a Subscriber last asked this dispatcher for room:
	// while it does, leases leave it some (see handingOff).
	reservedAt time.Time
	// running: Run is delivering, and reserve may promise it attempts.
	running bool
}

// newAdmission is the admission of a dispatcher with these limits, which
// has seen no merchant yet.
func newAdmission(workers, perMerchant, slowPerMerchant, slowShare int) admission {
	return admission{
		workers: workers, perMerchant: perMerchant, slowPerMerchant: slowPerMerchant, slowShare: slowShare,
		shuffle: func(ms []string) { rand.Shuffle(len(ms), func(i, j int) { ms[i], ms[j] = ms[j], ms[i] }) },
		busy:    map[string]int{},
		slow:    map[string]bool{},
		prompt:  map[string]bool{},
	}
}

// handOffQuiet is how long after a Subscriber's last request for room
// leases still leave it some. Past it the subscriber has stopped handing
// over (its runner lost the lock to another process, or nothing happens),
// and leases take every free worker again.
const handOffQuiet = 10 * time.Second

// handingOff reports whether a Subscriber asked for room within
// handOffQuiet of now.
func (ad *admission) handingOff(now time.Time) bool {
	return !ad.reservedAt.IsZero() && now.Sub(ad.reservedAt) < handOffQuiet
}

// leaseSize is how many attempts the next lease may lease: the free
// workers, at most maxLease, and only half of them while a Subscriber hands
// attempts over and no backlog is being leased.
func (ad *admission) leaseSize(now time.Time) int {
	free := min(ad.workers-ad.inFlight(), maxLease)
	if ad.handingOff(now) && !ad.more && free > 1 {
		// Half the free workers, so that a batch the subscriber
		// enqueues while the lease runs still finds room: refused, it
		// would be queued, its NOTIFY would start the next lease, which
		// the next batch would find under way, and so on. Not while a
		// backlog is being leased (the last lease came back full, or
		// no worker was free for it): then leases should take all they
		// can, and fewer of them.
		free = (free + 1) / 2
	}
	return free
}

// leaseStarted records that a lease of up to n attempts is under way (none
// when n is 0).
func (ad *admission) leaseStarted(n int) {
	ad.leasing, ad.endedInLease = n > 0, false
	ad.leaseN, ad.leaseRooms = n, map[string]int{}
}

// leaseFailed records that the lease under way leased nothing.
func (ad *admission) leaseFailed() {
	ad.leasing, ad.leaseN, ad.leaseRooms = false, 0, nil
}

// windowPicked narrows what reserve leaves to the lease under way, once
// its window has chosen: the rows it picked, in all and per merchant, are
// all it will lease. Until then reserve left it its n and every room its
// window granted.
func (ad *admission) windowPicked(picked map[string]int) {
	n := 0
	for _, k := range picked {
		n += k
	}
	ad.leaseN, ad.leaseRooms = n, maps.Clone(picked)
}

// leaseDone records the attempts a lease of up to n leased, which go in
// flight, and whether it was starved (it left due rows for want of a
// merchant's room or of the slow share). again says to lease once more
// at once.
//
// A full lease may have left due rows behind: lease again now, and again
// whenever a worker frees up, until a lease comes back short. A lease may
// also have left rows for want of a merchant's room, or of the slow share
// (starved): an attempt whose end gives that back wakes the dispatcher
// (see freesRoom), and one that ended while the lease ran, which counted
// it in flight, makes it lease again now. Only then: attempts end all the
// time, and leasing again after every lease that saw one end would keep
// leases running back to back, and Handoff's reservations waiting.
//
// With no worker free there was no lease, and whatever woke the
// dispatcher may still be due (say a message the subscriber had no worker
// left for, queued while the attempts it handed over hold them all): as
// after a full lease, the next attempt to end wakes it (more). Else that
// message waited for the poll: the end of an attempt of a merchant below
// its cap wakes nobody.
func (ad *admission) leaseDone(n int, got []leasedAttempt, starved bool) (again bool) {
	more := n > 0 && len(got) == n
	again = more || starved && ad.endedInLease
	ad.leasing, ad.leaseN, ad.leaseRooms = false, 0, nil
	ad.more = more || n == 0
	for _, c := range got {
		ad.busy[c.MerchantID]++
	}
	return again
}

// attemptEnded takes one of merchant m's attempts out of flight; rose says
// the attempt made m's cap go up (see setSlow). wake says the dispatcher
// should lease: a lease was cut short, or the end gives back room a lease
// may have lacked.
func (ad *admission) attemptEnded(m string, rose bool) (wake bool) {
	wake = ad.more || rose || ad.freesRoom(m)
	ad.endedInLease = ad.endedInLease || ad.leasing
	ad.countOut(m)
	return wake
}

// reserve takes room for the messages of msgs a Subscriber may hand over
// now and reports which, in take (nil: none). It takes only what a lease
// could have given: merchants seen answering in time and not slow, within
// perMerchant and workers. It takes nothing while Run is not delivering.
// A lease under way counted the attempts in flight as they were when it
// started, and may still lease leaseN of them, and what its window
// granted each merchant: reserve takes room beside those, never from
// them.
func (ad *admission) reserve(now time.Time, msgs []Message) (take []bool) {
	if !ad.running {
		// Not recorded: a request Run never saw must not make it halve
		// its leases once it starts (handingOff).
		return nil
	}
	ad.reservedAt = now
	free := ad.workers - ad.inFlight()
	if ad.leasing {
		free -= ad.leaseN
	}
	for i, m := range msgs {
		if free <= 0 {
			break
		}
		if !ad.prompt[m.MerchantID] || ad.slow[m.MerchantID] || ad.busy[m.MerchantID]+ad.leaseRooms[m.MerchantID] >= ad.perMerchant {
			continue
		}
		if take == nil {
			take = make([]bool, len(msgs))
		}
		take[i] = true
		ad.busy[m.MerchantID]++
		free--
	}
	return take
}

// countOut takes one attempt of merchant m out of busy (its attempt
// ended, or its reservation will not be used).
func (ad *admission) countOut(m string) {
	if ad.busy[m]--; ad.busy[m] <= 0 {
		delete(ad.busy, m)
	}
}

// inFlight is the attempts in flight: the sum of busy, whose entries are
// at most workers.
func (ad *admission) inFlight() int {
	n := 0
	for _, k := range ad.busy {
		n += k
	}
	return n
}

// allotment shares a lease's attempts out among the merchants of its
// window: a prompt merchant may have up to PerMerchant attempts in flight,
// any other up to SlowPerMerchant, and the slow ones all together up to
// SlowShare. It is asked only about merchants the window holds, so what a
// lease costs does not grow with the merchants the dispatcher remembers.
type allotment struct {
	ad *admission
	// full are merchants in flight that may get nothing more, whatever the
	// window holds: the lease leaves their rows out from the start.
	full []string
	// share is what the slow merchants may still get together.
	share int
}

// allot starts the allotment of a lease.
func (ad *admission) allot() *allotment {
	a := &allotment{ad: ad, share: ad.slowShare}
	for m, n := range ad.busy {
		if ad.slow[m] {
			a.share -= n
		}
	}
	for m, n := range ad.busy {
		if n >= ad.capOf(m) || ad.slow[m] && a.share <= 0 {
			a.full = append(a.full, m)
		}
	}
	return a
}

// capOf is how many attempts merchant m may have in flight: perMerchant
// once seen answering in time, slowPerMerchant otherwise.
func (ad *admission) capOf(m string) int {
	if ad.prompt[m] {
		return ad.perMerchant
	}
	return ad.slowPerMerchant
}

// rooms returns how many more attempts each merchant of rows (merchants a
// lease's window shows for the first time, each with its rows there) may
// get: its cap less its attempts in flight, and for a slow merchant no
// more than its rows there nor than what is left of the share. The share
// goes to the slow merchants in random order, so that no slow merchant
// always comes last, and only as far as they have rows to take it.
func (a *allotment) rooms(rows map[string]int) map[string]int {
	ad := a.ad
	out := make(map[string]int, len(rows))
	var slow []string
	for m := range rows {
		if ad.slow[m] {
			slow = append(slow, m)
			continue
		}
		out[m] = max(ad.capOf(m)-ad.busy[m], 0)
		if ad.leaseRooms != nil {
			ad.leaseRooms[m] = out[m]
		}
	}
	ad.shuffle(slow)
	for _, m := range slow {
		r := max(min(ad.slowPerMerchant-ad.busy[m], rows[m], a.share), 0)
		out[m] = r
		a.share -= r
		if ad.leaseRooms != nil {
			ad.leaseRooms[m] = r
		}
	}
	return out
}

// freesRoom says whether the end of one of merchant m's attempts in flight
// gives back room a lease may have lacked: m's own, when m is at its cap,
// or the slow share, when m is slow (its attempts end seldom, and the
// share may have run out). The attempt is not yet counted out of busy.
func (ad *admission) freesRoom(m string) bool {
	return ad.slow[m] || ad.busy[m] >= ad.capOf(m)
}

// maxRemembered bounds the merchants remembered as slow or prompt; past it
// the memory starts over (every merchant is probed again: harmless).
const maxRemembered = 100_000

// setSlow records that a merchant's attempt ran past SlowAfter (slow) or
// answered within it; rose says its cap went up (it answered in time, and
// was not known to).
func (ad *admission) setSlow(merchantID string, slow bool) (rose bool) {
	if len(ad.slow)+len(ad.prompt) >= maxRemembered {
		clear(ad.slow)
		clear(ad.prompt)
	}
	rose = !slow && !ad.prompt[merchantID]
	if slow {
		ad.slow[merchantID] = true
		delete(ad.prompt, merchantID)
	} else {
		ad.prompt[merchantID] = true
		delete(ad.slow, merchantID)
	}
	return rose
}
