// The handoff: a Subscriber in this process gives a message's first attempt
// to the dispatcher directly, already leased.

package webhooks

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// reserve is how a Subscriber enqueueing msgs in this process hands their
// first attempts to this dispatcher directly, instead of through a wake-up
// and a lease (a select and an update per message). It takes room for the
// messages it may take now and reports which, in take (see
// admission.reserve); the subscriber stores those already leased for
// attempt 1 (when their order key lets them go), and then calls unreserve
// for the ones it did not lease and handOver for the others once they are
// committed. It never waits for a lease under way: the subscriber calls it
// inside its transaction, and an open transaction holds back every reader
// of the event log.
func (d *Dispatcher) reserve(msgs []Message) (take []bool, lease time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.adm.running {
		return nil, 0
	}
	return d.adm.reserve(d.Now(), msgs), d.Lease
}

// unreserve gives back the room reserve took for attempts that will not
// be handed over.
func (d *Dispatcher) unreserve(merchants []string) {
	if len(merchants) == 0 {
		return
	}
	d.mu.Lock()
	for _, m := range merchants {
		d.adm.countOut(m)
	}
	d.mu.Unlock()
	d.signal() // the room may be what a lease lacked
}

// handOver gives Run attempts stored leased to it (see reserve), whose room
// is taken. If Run has stopped meanwhile they go back to the queue, as
// attempts abandoned at shutdown do.
func (d *Dispatcher) handOver(cs []leasedAttempt) {
	if len(cs) == 0 {
		return
	}
	d.mu.Lock()
	if d.adm.running {
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
		d.adm.countOut(c.MerchantID)
	}
	d.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := release(ctx, d.Pool, cs); err != nil {
		d.Log.Warn("webhooks: cannot hand back attempts; their leases will expire", zap.Error(err))
	}
}

// takeHanded returns the attempts handed over and not yet started.
func (d *Dispatcher) takeHanded() []leasedAttempt {
	d.mu.Lock()
	defer d.mu.Unlock()
	h := d.handed
	d.handed = nil
	return h
}
