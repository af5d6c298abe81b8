package app

import (
	"context"
	"encoding/hex"
	"errors"
	"sync"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/eventstore"
)

// An idempotency claim (an Idempotency-Key a request holds) is tied to the
// request's writes through the event store, so a key can never run twice:
//
//   - every append the request makes also appends a ClaimWrite to the
//     claim's own stream, the first one expecting the stream not to exist;
//   - a request that takes an abandoned claim over first appends a
//     ClaimFenced to that stream, also expecting it not to exist.
//
// Exactly one of the two first appends succeeds. If the takeover wins, the
// abandoned request can no longer write (its append conflicts and fails with
// ErrClaimLost); if the abandoned request wrote, the takeover learns it and
// must not run the request again, although its response was never stored.
// (A request that wrote and is merely slow, not dead, may then finish its
// remaining commands: it is still the one execution.)

// claimStreamPrefix names the claim streams ("idempotency-<owner hex>").
// Stored: never rename it.
const claimStreamPrefix = "idempotency"

// ClaimWrite records that an append was made under an idempotency key.
type ClaimWrite struct {
	KeyID string `json:"keyId"`
	Key   string `json:"idempotencyKey"`
}

func (ClaimWrite) EventType() string { return "idempotency.write" }

// ClaimFenced records that a claim was taken over before it wrote anything:
// nothing may be written under it any more.
type ClaimFenced struct {
	KeyID string `json:"keyId"`
	Key   string `json:"idempotencyKey"`
}

func (ClaimFenced) EventType() string { return "idempotency.fenced" }

// ErrClaimLost refuses a write of a request whose idempotency claim was
// taken over by a retry: the retry runs the request instead.
var ErrClaimLost = &domain.Error{Code: domain.Conflict, Message: "A request with this idempotency key is in progress"}

// Claim is the idempotency claim a request holds, carried in its context.
type Claim struct {
	stream string
	write  ClaimWrite

	mu   sync.Mutex
	rev  int64 // the claim stream's revision after our last write; -1 none
	lost bool
	// unknown: an append under the claim failed without a refusal (the
	// connection broke during COMMIT, say), so it may have committed.
	unknown bool
}

// NewClaim returns the claim of owner (the claim's random identity) on
// idempotency key key of API key keyID.
func NewClaim(owner []byte, keyID, key string) *Claim {
	return &Claim{stream: claimStream(owner), write: ClaimWrite{KeyID: keyID, Key: key}, rev: -1}
}

func claimStream(owner []byte) string { return claimStreamPrefix + "-" + hex.EncodeToString(owner) }

// Wrote reports whether any append under the claim committed.
func (c *Claim) Wrote() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rev >= 0
}

// OutcomeUnknown reports whether an append under the claim failed in a way
// that does not say whether it committed. Such a request must neither
// release its key (a retry could run it twice) nor store its answer: the
// claim stays in flight until a retry takes it over, and the takeover's
// fence learns from the claim's stream whether it wrote.
func (c *Claim) OutcomeUnknown() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.unknown
}

type claimKey struct{}

// WithClaim returns ctx carrying claim: every command run with it writes
// under the claim.
func WithClaim(ctx context.Context, claim *Claim) context.Context {
	return context.WithValue(ctx, claimKey{}, claim)
}

func claimFrom(ctx context.Context) *Claim {
	c, _ := ctx.Value(claimKey{}).(*Claim)
	return c
}

// stamp adds the claim's stream to an append. The caller holds c.mu until
// the append's outcome is recorded, so one request's commands write their
// markers in order.
func (c *Claim) stamp(appends []eventstore.StreamAppend, e *Engine, metaJSON []byte) ([]eventstore.StreamAppend, error) {
	if c.lost {
		return nil, ErrClaimLost
	}
	expected := eventstore.NoStream
	if c.rev >= 0 {
		expected = eventstore.Exact(uint64(c.rev))
	}
	ev, err := eventData(e, c.write, metaJSON)
	if err != nil {
		return nil, err
	}
	return append(appends, eventstore.StreamAppend{Stream: c.stream, Expected: expected, Events: []eventstore.EventData{ev}}), nil
}

// settle records an append's outcome; it turns a conflict on the claim's
// stream into ErrClaimLost.
func (c *Claim) settle(res eventstore.AppendResult, err error) error {
	if err == nil {
		c.rev = int64(res.Revisions[c.stream])
		return nil
	}
	var ce *eventstore.ConcurrencyError
	switch {
	case errors.As(err, &ce) && ce.Stream == c.stream:
		c.lost = true
		return ErrClaimLost
	case errors.As(err, &ce):
		// Refused as a whole: nothing was written.
	default:
		c.unknown = true
	}
	return err
}

// FenceClaim takes the claim of owner over for a retry of its request: it
// stops the claim from ever writing, or reports that it already wrote (the
// request must then not run again).
func (e *Engine) FenceClaim(ctx context.Context, owner []byte, keyID, key string, meta domain.Meta) (wrote bool, err error) {
	if meta.OccurredAt.IsZero() {
		meta.OccurredAt = e.Now()
	}
	metaJSON, err := marshalMeta(meta)
	if err != nil {
		return false, err
	}
	ev, err := eventData(e, ClaimFenced{KeyID: keyID, Key: key}, metaJSON)
	if err != nil {
		return false, err
	}
	stream := claimStream(owner)
	_, err = e.store.Append(ctx, eventstore.StreamAppend{Stream: stream, Expected: eventstore.NoStream, Events: []eventstore.EventData{ev}})
	var ce *eventstore.ConcurrencyError
	if err == nil || !errors.As(err, &ce) || ce.Stream != stream {
		return false, err
	}
	// The stream exists: the claim wrote first, or a racing retry fenced
	// it first (the claim row's compare-and-set then picks one retry).
	first, err := e.store.ReadStream(ctx, stream, 0, 1)
	if err != nil {
		return false, err
	}
	if len(first) == 0 {
		return false, errors.New("app: claim stream conflicts but is empty")
	}
	return first[0].Type != ClaimFenced{}.EventType(), nil
}
