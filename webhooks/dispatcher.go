package webhooks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/escrowd/escrowd/domain"
)

// Dispatcher delivers the outbox. Any number of dispatchers (in one process
// or many) share the work: each attempt is leased to one of them by the
// claim (FOR UPDATE SKIP LOCKED), numbered, and its outcome is stored only
// while that lease holds. Deliveries run on a bounded pool of workers with a
// cap per merchant, so a slow or dead receiver holds at most PerMerchant
// workers; nothing of it touches the API's request path.
//
// Many receivers dying at once must not take every worker either. A
// merchant gets PerMerchant attempts only once this dispatcher has seen its
// receiver answer within SlowAfter; until then (new, or after a restart) it
// gets SlowPerMerchant. A merchant whose attempt runs past SlowAfter is
// marked slow: SlowPerMerchant attempts, and all slow merchants together at
// most SlowShare, until one of its attempts answers in time again. So a
// receiver that dies holds at most SlowPerMerchant workers once it is seen
// dying, and the merchants that answer keep Workers - SlowShare workers
// however many receivers hang.
type Dispatcher struct {
	Pool      *pgxpool.Pool
	Endpoints Endpoints
	Log       *zap.Logger

	// Workers bounds concurrent attempts (default 64); PerMerchant bounds
	// one merchant's (default 16).
	Workers     int
	PerMerchant int
	// Timeout bounds one attempt (default 10 s, §5).
	Timeout time.Duration
	// SlowAfter marks a merchant slow when one of its attempts has run this
	// long (default Timeout/2); a slow or not yet answering merchant gets
	// SlowPerMerchant attempts at a time (default 2), and all slow merchants
	// together SlowShare (default Workers/4, at least 1).
	SlowAfter       time.Duration
	SlowPerMerchant int
	SlowShare       int
	// Lease is how long an attempt is reserved; a dispatcher that dies
	// mid-attempt loses it after this (default 1 min; keep it well above
	// Timeout).
	Lease time.Duration
	// PollInterval is how often due retries and expired leases are looked
	// for without a wake-up (default 1 s). New messages wake dispatchers at
	// once through NOTIFY.
	PollInterval time.Duration
	// Schedule are the pauses before retries (default DefaultSchedule).
	Schedule []time.Duration
	// Rand returns uniform numbers in [0, 1) for the jitter.
	Rand func() float64
	// Now is the clock of attempt times.
	Now func() time.Time
	// AllowPrivate lets callbacks reach private and loopback addresses
	// (ESCROW_WEBHOOK_ALLOW_PRIVATE); without it both environments' default
	// clients refuse them at connect time.
	AllowPrivate bool
	// Client sends test-environment webhooks; Live sends live ones (by
	// default clients whose dialer refuses non-public addresses, unless
	// AllowPrivate).
	Client, LiveClient *http.Client
	// Retention is how long finished deliveries are kept (failed ones
	// FailedRetentionFactor times as long); a Sweeper started by Run
	// deletes older ones, at most once per SweepInterval across every
	// dispatcher of the database (defaults DefaultRetention,
	// DefaultSweepInterval). A negative Retention keeps everything.
	Retention     time.Duration
	SweepInterval time.Duration
	// SignatureHeaders are the header names that each carry the signature
	// (default SignatureHeader alone; ESCROW_WEBHOOK_SIGNATURE_HEADERS), so
	// receivers written for another name verify unchanged (§7).
	// UserAgent is the User-Agent header (default UserAgent;
	// ESCROW_WEBHOOK_USER_AGENT).
	SignatureHeaders []string
	UserAgent        string
	// Metrics, when set, get the outbox gauges, refreshed every
	// MetricsInterval (default DefaultMetricsInterval) while Run runs.
	Metrics         *Metrics
	MetricsInterval time.Duration

	mu     sync.Mutex
	busy   map[string]int  // attempts in flight per merchant (in all: inFlight)
	slow   map[string]bool // seen running past SlowAfter
	prompt map[string]bool // seen answering within SlowAfter
	wake   chan struct{}
	// more: the last claim was cut short by free workers, or there were
	// none to claim with.
	more bool
	// claiming: a claim is under way, with the attempts in flight as they
	// were when it started.
	claiming bool
	// endedInClaim: an attempt ended while the claim under way ran, which
	// counted it in flight.
	endedInClaim bool
	// claimN is how many attempts the claim under way may lease, and
	// claimRooms what its window granted each merchant so far: reserve
	// leaves both to it.
	claimN     int
	claimRooms map[string]int
	// reservedAt is when a Subscriber last asked this dispatcher for room:
	// while it does, claims leave it some (see handingOff).
	reservedAt time.Time
	// running: Run is delivering, and reserve may promise it attempts.
	running bool
	// handed are attempts a Subscriber stored already leased to this
	// dispatcher (see reserve), not yet started; handedWake tells Run.
	handed     []claimed
	handedWake chan struct{}
	// waiting, when set (tests), is called each time Run has done what
	// woke it and goes back to waiting for a wake-up.
	waiting func()
}

// maxClaim bounds the rows one claim leases: a longer backlog goes out in
// several claims, back to back (see Run).
const maxClaim = 256

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

func (d *Dispatcher) defaults() {
	if d.Log == nil {
		d.Log = zap.NewNop()
	}
	if d.Workers <= 0 {
		d.Workers = 64
	}
	if d.PerMerchant <= 0 {
		d.PerMerchant = 16
	}
	if d.Timeout <= 0 {
		d.Timeout = 10 * time.Second
	}
	if d.SlowAfter <= 0 {
		d.SlowAfter = d.Timeout / 2
	}
	if d.SlowPerMerchant <= 0 {
		d.SlowPerMerchant = 2
	}
	d.SlowPerMerchant = min(d.SlowPerMerchant, d.PerMerchant)
	if d.SlowShare <= 0 {
		d.SlowShare = max(d.Workers/4, 1)
	}
	if d.Lease <= 0 {
		d.Lease = time.Minute
	}
	if d.PollInterval <= 0 {
		d.PollInterval = time.Second
	}
	if d.Schedule == nil {
		d.Schedule = DefaultSchedule
	}
	if d.Rand == nil {
		d.Rand = rand.Float64
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Client == nil {
		d.Client = NewClient(d.Workers, !d.AllowPrivate)
	}
	if d.LiveClient == nil {
		d.LiveClient = NewClient(d.Workers, !d.AllowPrivate)
	}
	if d.Retention == 0 {
		d.Retention = DefaultRetention
	}
	if d.MetricsInterval <= 0 {
		d.MetricsInterval = DefaultMetricsInterval
	}
	if len(d.SignatureHeaders) == 0 {
		d.SignatureHeaders = []string{SignatureHeader}
	}
	if d.UserAgent == "" {
		d.UserAgent = UserAgent
	}
	d.busy = map[string]int{}
	d.slow = map[string]bool{}
	d.prompt = map[string]bool{}
	d.wake = make(chan struct{}, 1)
	d.handedWake = make(chan struct{}, 1)
}

// NewClient is the HTTP client of deliveries: no proxy, no redirects (a 3xx
// is not a delivery), keep-alive connections for up to conns attempts, and
// with guard a dialer that refuses non-public addresses after resolution.
func NewClient(conns int, guard bool) *http.Client {
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	if guard {
		dialer.Control = guardedControl
	}
	tr := &http.Transport{
		DialContext:           dialer.DialContext,
		MaxIdleConns:          2 * conns,
		MaxIdleConnsPerHost:   conns,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   5 * time.Second,
		ExpectContinueTimeout: time.Second,
		ForceAttemptHTTP2:     true,
	}
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}
}

func (d *Dispatcher) signal() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// Run delivers until ctx ends. Attempts in flight then are abandoned and
// handed back to the queue at once; a dispatcher killed outright leaves
// them to its lease. Alongside, it sweeps the outbox (Retention) and
// refreshes the gauges (Metrics).
func (d *Dispatcher) Run(ctx context.Context) error {
	d.defaults()
	results := make(chan outcome, 4*d.Workers)
	var (
		wg       sync.WaitGroup
		aborted  []claimed
		abortMu  sync.Mutex
		flushed  = make(chan struct{})
		listened = make(chan struct{})
		aside    sync.WaitGroup // the sweeper and the gauges
	)
	go func() { defer close(listened); d.listen(ctx) }()
	go func() { defer close(flushed); d.flush(results) }()
	if d.Retention > 0 {
		sw := &Sweeper{Pool: d.Pool, Log: d.Log, Retention: d.Retention, Interval: d.SweepInterval, Now: d.Now}
		aside.Go(func() { sw.Run(ctx) })
	}
	if d.Metrics != nil {
		aside.Go(func() { d.refreshMetrics(ctx) })
	}
	defer func() {
		wg.Wait()
		close(results)
		<-flushed
		<-listened
		aside.Wait()
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := release(rctx, d.Pool, aborted); err != nil {
			d.Log.Warn("webhooks: cannot hand back abandoned attempts; their leases will expire", zap.Error(err))
		}
	}()
	// start runs attempts, each in its own goroutine; they are counted in
	// busy already. The endpoints are looked up (a read per merchant) off
	// the loop, which goes on claiming and taking handed-over attempts
	// meanwhile.
	start := func(got []claimed, via string) {
		if len(got) == 0 {
			return
		}
		if d.Metrics != nil {
			d.Metrics.started.WithLabelValues(via).Add(float64(len(got)))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			eps := d.endpoints(ctx, got)
			for _, c := range got {
				wg.Add(1) // the batch's own count keeps wg above zero
				go func() {
					defer wg.Done()
					ep := eps[endpointKey{c.MerchantID, c.Environment}]
					slowTimer := time.AfterFunc(d.SlowAfter, func() { d.setSlow(c.MerchantID, true) })
					o, ok := d.attempt(ctx, c, ep)
					// Answered in time. A failed endpoint lookup is counted
					// as sent but asked no receiver: it proves nothing.
					rose := false
					if slowTimer.Stop() && ok && o.Sent && ep.err == nil {
						rose = d.setSlow(c.MerchantID, false)
					}
					d.mu.Lock()
					wake := d.more || rose || d.freesRoom(c.MerchantID)
					d.endedInClaim = d.endedInClaim || d.claiming
					d.countOut(c.MerchantID)
					d.mu.Unlock()
					if ok {
						results <- o
					} else {
						abortMu.Lock()
						aborted = append(aborted, c)
						abortMu.Unlock()
					}
					if wake {
						d.signal()
					}
				}()
			}
		}()
	}
	d.mu.Lock()
	d.running = true
	d.mu.Unlock()
	defer func() {
		// Attempts handed over but not started go back to the queue with
		// those abandoned (deferred calls run last in, first out: this
		// one before the release above).
		d.mu.Lock()
		d.running = false
		handed := d.handed
		d.handed = nil
		d.mu.Unlock()
		abortMu.Lock()
		aborted = append(aborted, handed...)
		abortMu.Unlock()
	}()
	timer := time.NewTimer(0)
	defer timer.Stop()
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		start(d.takeHanded(), viaHandoff)
		d.mu.Lock()
		free := min(d.Workers-d.inFlight(), maxClaim)
		if d.handingOff() && !d.more && free > 1 {
			// Half the free workers, so that a batch the subscriber
			// enqueues while the claim runs still finds room: refused, it
			// would be queued, its NOTIFY would start the next claim, which
			// the next batch would find under way, and so on. Not while a
			// backlog is being claimed (the last claim came back full, or
			// no worker was free for it): then claims should take all they
			// can, and fewer of them.
			free = (free + 1) / 2
		}
		a := d.allot()
		d.claiming, d.endedInClaim = free > 0, false
		d.claimN, d.claimRooms = free, map[string]int{}
		d.mu.Unlock()
		var (
			got     []claimed
			starved bool
		)
		if free > 0 {
			var err error
			got, starved, err = claimReporting(ctx, d.Pool, free, d.Lease, a.full, a.rooms, d.claimPicked)
			if err != nil {
				d.mu.Lock()
				d.claiming, d.claimN, d.claimRooms = false, 0, nil
				d.mu.Unlock()
				if ctx.Err() != nil {
					break
				}
				d.Log.Error("webhooks: claim failed", zap.Error(err))
				sleepCtx(ctx, backoff)
				backoff = min(2*backoff, 10*time.Second)
				continue
			}
			backoff = 100 * time.Millisecond
		}
		// A full claim may have left due rows behind: claim again now, and
		// again whenever a worker frees up, until a claim comes back short.
		// A claim may also have left rows for want of a merchant's room,
		// or of the slow share (starved): an attempt whose end gives that
		// back wakes the dispatcher (see freesRoom), and one that ended
		// while the claim ran, which counted it in flight, makes it claim
		// again now. Only then: attempts end all the time, and claiming
		// again after every claim that saw one end would keep claims
		// running back to back, and Handoff's reservations waiting.
		//
		// With no worker free there was no claim, and whatever woke the
		// dispatcher may still be due (say a message the subscriber had
		// no worker left for, queued while the attempts it handed over
		// hold them all): as after a full claim, the next attempt to end
		// wakes it (d.more). Else that message waited for the poll: the
		// end of an attempt of a merchant below its cap wakes nobody.
		more := free > 0 && len(got) == free
		d.mu.Lock()
		again := more || starved && d.endedInClaim
		d.claiming, d.claimN, d.claimRooms = false, 0, nil
		d.more = more || free == 0
		for _, c := range got {
			d.busy[c.MerchantID]++
		}
		d.mu.Unlock()
		start(got, viaClaim)
		if again {
			continue
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(d.PollInterval)
		if d.waiting != nil {
			d.waiting()
		}
	wait:
		for {
			select {
			case <-ctx.Done():
				break wait
			case <-d.wake:
				break wait
			case <-timer.C:
				break wait
			case <-d.handedWake:
				// Handed-over attempts need no claim.
				start(d.takeHanded(), viaHandoff)
			}
		}
	}
	return nil
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

// reserve is how a Subscriber enqueueing msgs in this process hands their
// first attempts to this dispatcher directly, instead of through a wake-up
// and a claim (a select and an update per message). It takes room for the
// messages it may take now and reports which, in take; the subscriber
// stores those already leased for attempt 1 (when their order key lets
// them go), and then calls unreserve for the ones it did not lease and
// handOver for the others once they are committed. It takes only what a
// claim could have given: merchants seen answering in time and not slow,
// within PerMerchant and Workers. It takes nothing while Run is not
// delivering. A claim under way counted the attempts in flight as they
// were when it started, and may still lease claimN of them, and what its
// window granted each merchant: reserve takes room beside those, never
// from them. It never waits for the claim: the subscriber calls it inside
// its transaction, and an open transaction holds back every reader of the
// event log.
func (d *Dispatcher) reserve(msgs []Message) (take []bool, lease time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.running {
		// Not recorded: a request Run never saw must not make it halve
		// its claims once it starts (handingOff).
		return nil, 0
	}
	d.reservedAt = d.Now()
	free := d.Workers - d.inFlight()
	if d.claiming {
		free -= d.claimN
	}
	for i, m := range msgs {
		if free <= 0 {
			break
		}
		if !d.prompt[m.MerchantID] || d.slow[m.MerchantID] || d.busy[m.MerchantID]+d.claimRooms[m.MerchantID] >= d.PerMerchant {
			continue
		}
		if take == nil {
			take = make([]bool, len(msgs))
		}
		take[i] = true
		d.busy[m.MerchantID]++
		free--
	}
	return take, d.Lease
}

// unreserve gives back the room reserve took for attempts that will not
// be handed over.
func (d *Dispatcher) unreserve(merchants []string) {
	if len(merchants) == 0 {
		return
	}
	d.mu.Lock()
	for _, m := range merchants {
		d.countOut(m)
	}
	d.mu.Unlock()
	d.signal() // the room may be what a claim lacked
}

// handOver gives Run attempts stored leased to it (see reserve), whose room
// is taken. If Run has stopped meanwhile they go back to the queue, as
// attempts abandoned at shutdown do.
func (d *Dispatcher) handOver(cs []claimed) {
	if len(cs) == 0 {
		return
	}
	d.mu.Lock()
	if d.running {
		d.handed = append(d.handed, cs...)
		d.mu.Unlock()
		select {
		case d.handedWake <- struct{}{}:
		default:
		}
		return
	}
	// Their room goes back too: busy counted them since reserve.
	for _, c := range cs {
		d.countOut(c.MerchantID)
	}
	d.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := release(ctx, d.Pool, cs); err != nil {
		d.Log.Warn("webhooks: cannot hand back attempts; their leases will expire", zap.Error(err))
	}
}

// countOut takes one attempt of merchant m out of busy (its attempt
// ended, or its reservation will not be used). Callers hold d.mu.
func (d *Dispatcher) countOut(m string) {
	if d.busy[m]--; d.busy[m] <= 0 {
		delete(d.busy, m)
	}
}

// takeHanded returns the attempts handed over and not yet started.
func (d *Dispatcher) takeHanded() []claimed {
	d.mu.Lock()
	defer d.mu.Unlock()
	h := d.handed
	d.handed = nil
	return h
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

type endpointKey struct {
	merchantID string
	env        domain.Environment
}

// endpointResult is an endpoint or why it could not be looked up.
type endpointResult struct {
	ep  Endpoint
	err error
}

// endpoints looks up each merchant and environment of a claimed batch once,
// concurrently.
func (d *Dispatcher) endpoints(ctx context.Context, cs []claimed) map[endpointKey]endpointResult {
	var keys []endpointKey
	seen := map[endpointKey]bool{}
	for _, c := range cs {
		if k := (endpointKey{c.MerchantID, c.Environment}); !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	results := make([]endpointResult, len(keys))
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ep, err := d.Endpoints.Endpoint(ctx, k.merchantID, k.env)
			results[i] = endpointResult{ep, err}
		}()
	}
	wg.Wait()
	out := make(map[endpointKey]endpointResult, len(keys))
	for i, k := range keys {
		out[k] = results[i]
	}
	return out
}

// attempt makes one delivery attempt; ok is false when ctx ended first
// (the dispatcher is stopping: the attempt is abandoned, not judged).
func (d *Dispatcher) attempt(ctx context.Context, c claimed, ep endpointResult) (outcome, bool) {
	o := outcome{ID: c.ID, Attempt: c.Attempt, At: d.Now()}
	if ep.err != nil {
		if ctx.Err() != nil {
			return o, false
		}
		// Counted like a sent attempt: a lookup that keeps failing must go
		// through the schedule to failed, visibly, not loop unseen. The
		// merchant sees a plain message; the cause goes to the log.
		d.Log.Error("webhooks: endpoint lookup failed", zap.String("merchant_id", c.MerchantID), zap.Error(ep.err))
		o.Sent = true
		return d.judge(o, 0, errEndpointLookup), true
	}
	if ep.ep.URL == "" {
		msg := "No callback URL is set for this environment"
		o.Status, o.Err = StatusNoEndpoint, &msg
		return o, true
	}
	o.Sent = true
	code, err := d.send(ctx, c, ep.ep)
	o.Took = d.Now().Sub(o.At)
	if err != nil && code == 0 && ctx.Err() != nil {
		return o, false
	}
	return d.judge(o, code, err), true
}

// judge turns a response into the outcome: 2xx is delivered, anything else
// is retried after the schedule's next pause, or failed past its end.
func (d *Dispatcher) judge(o outcome, code int, err error) outcome {
	if code != 0 {
		c := int32(code)
		o.Code = &c
	}
	if err == nil && code >= 200 && code < 300 {
		o.Status = StatusDelivered
		return o
	}
	msg := ""
	if err != nil {
		msg = err.Error()
	} else {
		msg = "HTTP " + strconv.Itoa(code)
	}
	o.Err = &msg
	if delay, ok := NextDelay(d.Schedule, o.Attempt, d.Rand()); ok {
		o.Status, o.Delay = StatusPending, delay
	} else {
		o.Status = StatusFailed
	}
	return o
}

// errEndpointLookup is the logged error of an attempt whose callback URL
// and secret could not be read.
var errEndpointLookup = errors.New("the callback endpoint could not be looked up")

// maxErrorBody is how much of a failing response is kept in the log.
const maxErrorBody = 256

func (d *Dispatcher) send(ctx context.Context, c claimed, ep Endpoint) (int, error) {
	u, err := url.Parse(ep.URL)
	if err != nil {
		return 0, errors.New("callback URL is invalid")
	}
	client := d.Client
	if c.Environment == domain.Live {
		if u.Scheme != "https" {
			return 0, errors.New("a live callback URL must use https")
		}
		client = d.LiveClient
	}
	rctx, cancel := context.WithTimeout(ctx, d.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, ep.URL, bytes.NewReader(c.Body))
	if err != nil {
		return 0, errors.New("callback URL is invalid")
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", d.UserAgent)
	sig := Sign(ep.Secret, c.Body)
	for _, name := range d.SignatureHeaders {
		req.Header.Set(name, sig)
	}
	req.Header.Set(AttemptHeader, strconv.Itoa(c.Attempt))
	res, err := client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(rctx.Err(), context.DeadlineExceeded) {
			return 0, fmt.Errorf("no response within %s", d.Timeout)
		}
		if errors.Is(err, ErrBlockedAddress) {
			return 0, ErrBlockedAddress
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			return 0, ue.Err
		}
		return 0, err
	}
	defer res.Body.Close()
	if res.StatusCode >= 200 && res.StatusCode < 300 {
		_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
		return res.StatusCode, nil
	}
	snippet, _ := io.ReadAll(io.LimitReader(res.Body, maxErrorBody))
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
	if len(bytes.TrimSpace(snippet)) > 0 {
		return res.StatusCode, fmt.Errorf("HTTP %d: %s", res.StatusCode, bytes.TrimSpace(snippet))
	}
	return res.StatusCode, fmt.Errorf("HTTP %d", res.StatusCode)
}

// flush stores outcomes as they come, batching whatever arrived while the
// previous batch was written (group commit).
func (d *Dispatcher) flush(results <-chan outcome) {
	for o := range results {
		batch := []outcome{o}
	drain:
		for len(batch) < 1000 {
			select {
			case o, ok := <-results:
				if !ok {
					break drain
				}
				batch = append(batch, o)
			default:
				break drain
			}
		}
		for try := 0; ; try++ {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			unblocked, err := recordOutcomes(ctx, d.Pool, batch)
			cancel()
			if err == nil {
				if unblocked {
					d.signal()
				}
				break
			}
			if try == 4 {
				// The leases will expire and the messages go out again:
				// at least once, never lost.
				d.Log.Error("webhooks: cannot record outcomes; they will be retried", zap.Int("count", len(batch)), zap.Error(err))
				break
			}
			time.Sleep(time.Duration(100<<try) * time.Millisecond)
		}
	}
}

// refreshMetrics updates the outbox gauges every MetricsInterval until ctx
// ends.
func (d *Dispatcher) refreshMetrics(ctx context.Context) {
	failing := false
	for {
		qctx, cancel := context.WithTimeout(ctx, max(d.MetricsInterval, time.Second))
		err := d.Metrics.refresh(qctx, d.Pool)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil && !failing {
			d.Log.Warn("webhooks: cannot refresh the outbox gauges", zap.Error(err))
		}
		failing = err != nil
		sleepCtx(ctx, d.MetricsInterval)
		if ctx.Err() != nil {
			return
		}
	}
}

// listen wakes the dispatcher on every NOTIFY of the outbox channel
// (messages enqueued, retried, or unblocked by another dispatcher).
func (d *Dispatcher) listen(ctx context.Context) {
	for ctx.Err() == nil {
		err := func() error {
			conn, err := d.Pool.Acquire(ctx)
			if err != nil {
				return err
			}
			defer conn.Release()
			if _, err := conn.Exec(ctx, "LISTEN "+notifyChannel); err != nil {
				return err
			}
			defer func() {
				uctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				if _, err := conn.Exec(uctx, "UNLISTEN "+notifyChannel); err != nil {
					_ = conn.Conn().Close(uctx)
				}
			}()
			// Catch up with anything enqueued before LISTEN took effect.
			d.signal()
			for {
				if _, err := conn.Conn().WaitForNotification(ctx); err != nil {
					return err
				}
				d.signal()
			}
		}()
		if ctx.Err() == nil {
			d.Log.Warn("webhooks: listen connection lost, retrying", zap.Error(err))
			sleepCtx(ctx, time.Second)
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
