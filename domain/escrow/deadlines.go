package escrow

import (
	"time"

	"github.com/escrowd/escrowd/domain"
)

// A deadline is a time at which the service itself acts on an escrow. Each
// is fixed by the event that starts it, by the rules at that time: the
// unpaid expiry by the creation (Created.ExpiresAt), the auto-release by
// the payment (Funded.ReleaseAt). The service reads them from a read model
// and issues the decision below when one passes; the decision checks the
// escrow as it stands, so a deadline acted on late, twice or after the
// escrow moved on does nothing wrong.

// DeadlineKind names what the service does when a deadline passes.
type DeadlineKind string

const (
	// AutoReleaseDeadline releases an ONGOING auto-release escrow to the
	// seller as a buyer's confirmation would (COMPLETED).
	AutoReleaseDeadline DeadlineKind = "auto_release"
	// ExpiryDeadline deletes an escrow still awaiting payment.
	ExpiryDeadline DeadlineKind = "unpaid_expiry"
)

// MaxExpiresInHours bounds an unpaid link's life (30 days).
const MaxExpiresInHours = 720

// ErrNotDue refuses acting on a deadline that has not passed.
var ErrNotDue = domain.Errorf(domain.Conflict, "The escrow's deadline has not passed yet")

// expiryOf is the expiry of a link created at at that expires after hours
// (nil: never).
func expiryOf(hours *int, at time.Time) (time.Time, error) {
	if hours == nil {
		return time.Time{}, nil
	}
	if *hours < 1 || *hours > MaxExpiresInHours {
		return time.Time{}, domain.Invalidf("expiresInHours must be an integer between 1 and %d", MaxExpiresInHours)
	}
	return at.Add(time.Duration(*hours) * time.Hour), nil
}

// Window is the delivery window: maxDelivery × deliveryTimeline.
func (s State) Window() time.Duration {
	return time.Duration(s.Terms.MaxDelivery) * timelineUnits[s.Terms.DeliveryTimeline]
}

// releaseAt is when a standard auto-release escrow paid at at is
// released (zero when it is not one).
func (s State) releaseAt(at time.Time) time.Time {
	if s.Type() != StandardSettlement || !s.Terms.AutoRelease {
		return time.Time{}
	}
	return at.Add(s.Window())
}

// NextDeadline is the escrow's pending deadline, if it has one: the
// expiry of an unpaid link, the auto-release of an ONGOING escrow.
func (s State) NextDeadline() (DeadlineKind, time.Time, bool) {
	switch {
	case !s.Exists():
	case s.Status == Pending && !s.ExpiresAt.IsZero():
		return ExpiryDeadline, s.ExpiresAt, true
	case s.Status == Ongoing && !s.ReleaseAt.IsZero():
		return AutoReleaseDeadline, s.ReleaseAt, true
	}
	return "", time.Time{}, false
}

// AutoRelease decides the service's release of an auto-release escrow
// whose delivery window has elapsed: the same settlement as the buyer's
// confirmation (COMPLETED). A disputed or settled escrow is refused.
func AutoRelease(s State, at time.Time) (Released, error) {
	if !s.Exists() || s.Type() != StandardSettlement || s.BuyerID == "" || s.ReleaseAt.IsZero() {
		return Released{}, ErrActionNotAllowed
	}
	if err := s.may(ActConfirm); err != nil {
		return Released{}, err
	}
	if at.Before(s.ReleaseAt) {
		return Released{}, ErrNotDue
	}
	return newReleased(s, s.Completion(Completed), at)
}

// Expire decides the service's deletion of a link still unpaid at its
// expiry.
func Expire(s State, at time.Time) (Deleted, error) {
	if !s.Exists() || s.ExpiresAt.IsZero() || !s.Allows(ActDelete) {
		return Deleted{}, ErrActionNotAllowed
	}
	if at.Before(s.ExpiresAt) {
		return Deleted{}, ErrNotDue
	}
	return Deleted{At: at}, nil
}
