package paystacksim

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/escrowd/escrowd/internal/paystack"
)

// Delivery is one event the simulator sent (or was told not to send).
type Delivery struct {
	Seq   int    // order of creation, from 1
	Event string // "charge.success", "transfer.success", ...
	Body  []byte
	// Signature is the x-paystack-signature sent: the body's HMAC-SHA512
	// under the secret key, or under another key when Forged.
	Signature string
	Forged    bool
	// Lie: the body's status or amount was altered after the fact (the
	// signature is genuine; verify tells the truth).
	Lie bool
	// Suppressed: never sent (SuppressEvents).
	Suppressed bool
	// Statuses are the webhook's answers, one per attempt (0: no answer).
	Statuses []int
	// Delivered: the webhook answered 200.
	Delivered bool
	// Done: no more attempts will be made.
	Done bool
}

// lie is the alteration LieInNextEvent makes.
type lie struct {
	status string
	amount int64
}

// DuplicateEvents makes every following event be sent twice (two
// deliveries of the same body), or stops it.
func (s *Sim) DuplicateEvents(on bool) { s.mu.Lock(); s.st.duplicate = on; s.mu.Unlock() }

// SuppressEvents makes the following events not be sent at all (they are
// recorded as suppressed: the service must find their outcome by verify,
// polling or reconciliation), or stops it.
func (s *Sim) SuppressEvents(on bool) { s.mu.Lock(); s.st.suppress = on; s.mu.Unlock() }

// ForgeNextEvent makes the next event be signed with a key other than the
// secret key: the webhook must refuse it (and the simulator redelivers it,
// as Paystack would a refused one, until its attempts are spent).
func (s *Sim) ForgeNextEvent() { s.mu.Lock(); s.st.forgeNext++; s.mu.Unlock() }

// LieInNextEvent makes the next event's body claim status (when not "")
// and amount in kobo (when not 0) instead of the truth, genuinely signed:
// only what verify answers may be believed.
func (s *Sim) LieInNextEvent(status string, amount int64) {
	s.mu.Lock()
	s.st.lies = append(s.st.lies, lie{status: status, amount: amount})
	s.mu.Unlock()
}

// SendEvent sends an event of the simulator's making, for something that
// did not happen: genuinely signed, or forged.
func (s *Sim) SendEvent(event string, data json.RawMessage, forged bool) {
	s.mu.Lock()
	if forged {
		s.st.forgeNext++
	}
	s.mu.Unlock()
	s.emit(event, data)
}

// Events returns every event made so far, in order.
func (s *Sim) Events() []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Delivery, len(s.st.deliveries))
	for i, d := range s.st.deliveries {
		out[i] = *d
		out[i].Statuses = slices.Clone(d.Statuses)
	}
	return out
}

// emit makes an event of data, applies the event faults, and delivers it.
func (s *Sim) emit(event string, data any) {
	s.mu.Lock()
	raw, err := json.Marshal(data)
	if err != nil {
		s.mu.Unlock()
		panic(err) // the simulator's own data always encodes
	}
	lied := false
	if len(s.st.lies) > 0 {
		l := s.st.lies[0]
		s.st.lies = s.st.lies[1:]
		var m map[string]any
		if json.Unmarshal(raw, &m) == nil {
			if l.status != "" {
				m["status"] = l.status
			}
			if l.amount != 0 {
				m["amount"] = l.amount
			}
			raw, _ = json.Marshal(m)
			lied = true
		}
	}
	body, _ := json.Marshal(struct {
		Event string          `json:"event"`
		Data  json.RawMessage `json:"data"`
	}{event, raw})
	forged := s.st.forgeNext > 0
	if forged {
		s.st.forgeNext--
	}
	sig := paystack.Sign(s.cfg.SecretKey, body)
	if forged {
		sig = paystack.Sign("forged-"+s.cfg.SecretKey, body)
	}
	copies := 1
	if s.st.duplicate {
		copies = 2
	}
	var sends []*Delivery
	for range copies {
		d := &Delivery{Seq: len(s.st.deliveries) + 1, Event: event, Body: body, Signature: sig, Forged: forged,
			Lie: lied, Suppressed: s.st.suppress}
		if d.Suppressed || s.cfg.WebhookURL == "" {
			d.Done = true
		} else {
			sends = append(sends, d)
		}
		s.st.deliveries = append(s.st.deliveries, d)
	}
	s.mu.Unlock()
	for _, d := range sends {
		s.background(func() { s.deliver(d) })
	}
}

// deliver posts d until the webhook answers 200 or the attempts are spent,
// waiting EventBackoff, then twice as long, between attempts.
func (s *Sim) deliver(d *Delivery) {
	wait := s.cfg.EventBackoff
	for attempt := 1; ; attempt++ {
		status := s.post(d)
		s.mu.Lock()
		d.Statuses = append(d.Statuses, status)
		d.Delivered = status == http.StatusOK
		last := d.Delivered || attempt >= s.cfg.EventAttempts
		d.Done = last
		s.mu.Unlock()
		if last {
			if !d.Delivered {
				s.log.Warn("paystacksim: event not accepted", slog.String("event", d.Event), slog.Int("seq", d.Seq),
					slog.Int("attempts", attempt), slog.Int("status", status))
			}
			return
		}
		if !s.sleep(wait) {
			s.mu.Lock()
			d.Done = true
			s.mu.Unlock()
			return
		}
		wait = min(wait*2, time.Minute)
	}
}

// post sends one attempt and returns the webhook's status (0: none).
func (s *Sim) post(d *Delivery) int {
	req, err := http.NewRequestWithContext(s.ctx, http.MethodPost, s.cfg.WebhookURL, bytes.NewReader(d.Body))
	if err != nil {
		return 0
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-paystack-signature", d.Signature)
	req.Header.Set("User-Agent", "paystacksim")
	resp, err := s.hook.Do(req)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	_ = resp.Body.Close()
	return resp.StatusCode
}

// fault is what happens to the next request of an operation.
type fault struct {
	failStatus int           // answer this status, without taking effect
	delay      time.Duration // wait this long first, then take effect
	drop       bool          // take effect, then close the connection unanswered
}

// FailNext makes the next n requests of op (a paystack.Op… name) answer
// httpStatus with Paystack's error shape, without taking effect.
func (s *Sim) FailNext(op string, httpStatus int, n int) {
	s.queueFault(op, fault{failStatus: httpStatus}, n)
}

// DelayNext makes the next n requests of op wait d before they are
// handled. They take effect whether or not the client waited for them:
// a client that timed out does not know the outcome.
func (s *Sim) DelayNext(op string, d time.Duration, n int) {
	s.queueFault(op, fault{delay: d}, n)
}

// DropAnswer makes the next n requests of op take effect and then lose
// their answer: the connection is closed without one.
func (s *Sim) DropAnswer(op string, n int) {
	s.queueFault(op, fault{drop: true}, n)
}

func (s *Sim) queueFault(op string, f fault, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.st.faults[op] = append(s.st.faults[op], f)
	}
}

// takeFault pops the next fault queued for op (none: the zero fault).
func (s *Sim) takeFault(op string) fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.st.faults[op]
	if len(q) == 0 {
		return fault{}
	}
	s.st.faults[op] = q[1:]
	return q[0]
}
