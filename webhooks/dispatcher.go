package webhooks

import (
	"context"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/escrowd/escrowd/domain"
)

// Dispatcher delivers the outbox. Any number of dispatchers (in one process
// or many) share the work: each attempt is leased to one of them by the
// lease (FOR UPDATE SKIP LOCKED), numbered, and its outcome is stored only
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
	// Timeout bounds one attempt (default 10 s).
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
	// Sealer opens the bodies a Subscriber with a Sealer sealed (the same
	// keys); without one such a message is not sent (its attempt fails).
	Sealer domain.Sealer
	// Retention is how long finished deliveries are kept (failed ones
	// FailedRetentionFactor times as long); a Sweeper started by Run
	// deletes older ones, at most once per SweepInterval across every
	// dispatcher of the database (defaults DefaultRetention,
	// DefaultSweepInterval). A negative Retention keeps everything.
	Retention     time.Duration
	SweepInterval time.Duration
	// SignatureHeaders are the header names that each carry the signature
	// (default SignatureHeader alone; ESCROW_WEBHOOK_SIGNATURE_HEADERS), so
	// receivers written for another name verify unchanged.
	// UserAgent is the User-Agent header (default UserAgent;
	// ESCROW_WEBHOOK_USER_AGENT).
	SignatureHeaders []string
	UserAgent        string
	// Metrics, when set, get the outbox gauges, refreshed every
	// MetricsInterval (default DefaultMetricsInterval) while Run runs.
	Metrics         *Metrics
	MetricsInterval time.Duration
	// Idle, when set, is called (from Run) each time Run has done what
	// woke it (a notification, a handoff, its poll) and goes back to
	// waiting: whoever watches learns that everything the dispatcher was
	// told of before has been acted on, without guessing how long it takes.
	Idle func()

	mu   sync.Mutex
	adm  admission // which attempts may start now; guarded by mu
	wake chan struct{}
	// handed are attempts a Subscriber stored already leased to this
	// dispatcher (see reserve), not yet started; handedWake tells Run.
	handed     []leasedAttempt
	handedWake chan struct{}
}

// maxLease bounds the rows one lease leases: a longer backlog goes out in
// several leases, back to back (see Run).
const maxLease = 256

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
	d.mu.Lock() // tests may watch a dispatcher whose Run is starting
	d.adm = newAdmission(d.Workers, d.PerMerchant, d.SlowPerMerchant, d.SlowShare)
	d.mu.Unlock()
	d.wake = make(chan struct{}, 1)
	d.handedWake = make(chan struct{}, 1)
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
		aborted  []leasedAttempt
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
	// the loop, which goes on leasing and taking handed-over attempts
	// meanwhile.
	start := func(got []leasedAttempt, via string) {
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
					wake := d.adm.attemptEnded(c.MerchantID, rose)
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
	d.adm.running = true
	d.mu.Unlock()
	defer func() {
		// Attempts handed over but not started go back to the queue with
		// those abandoned (deferred calls run last in, first out: this
		// one before the release above).
		d.mu.Lock()
		d.adm.running = false
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
		free := d.adm.leaseSize(d.Now())
		a := d.adm.allot()
		d.adm.leaseStarted(free)
		d.mu.Unlock()
		var (
			got     []leasedAttempt
			starved bool
		)
		if free > 0 {
			var err error
			got, starved, err = leaseDueReporting(ctx, d.Pool, free, d.Lease, a.full, d.rooms(a), d.windowPicked)
			if err != nil {
				d.mu.Lock()
				d.adm.leaseFailed()
				d.mu.Unlock()
				if ctx.Err() != nil {
					break
				}
				d.Log.Error("webhooks: lease failed", zap.Error(err))
				sleepCtx(ctx, backoff)
				backoff = min(2*backoff, 10*time.Second)
				continue
			}
			backoff = 100 * time.Millisecond
		}
		// See leaseDone for when to lease again at once.
		d.mu.Lock()
		again := d.adm.leaseDone(free, got, starved)
		d.mu.Unlock()
		start(got, viaLease)
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
		if d.Idle != nil {
			d.Idle()
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
				// Handed-over attempts need no lease.
				start(d.takeHanded(), viaHandoff)
			}
		}
	}
	return nil
}

// setSlow records that a merchant's attempt ran past SlowAfter (slow) or
// answered within it (see admission.setSlow).
func (d *Dispatcher) setSlow(merchantID string, slow bool) (rose bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.adm.setSlow(merchantID, slow)
}

// windowPicked tells the admission what the lease under way picked (see
// admission.windowPicked); the lease calls it from its transaction.
func (d *Dispatcher) windowPicked(picked map[string]int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.adm.windowPicked(picked)
}

// rooms is a.rooms under mu, for the lease under way to ask from its
// transaction.
func (d *Dispatcher) rooms(a *allotment) func(map[string]int) map[string]int {
	return func(rows map[string]int) map[string]int {
		d.mu.Lock()
		defer d.mu.Unlock()
		return a.rooms(rows)
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
