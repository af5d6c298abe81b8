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
	// WindowEndingDeadline reminds buyer and seller (the webhook
	// escrow.window_ending) that an ONGOING escrow's window is ending.
	WindowEndingDeadline DeadlineKind = "window_ending"
)

// ReminderLead is how long before the window elapses the window-ending
// reminder is sent (at payment for a window of exactly that); a window
// shorter than that is reminded of half-way.
const ReminderLead = 24 * time.Hour

// Reminded records a reminder sent, once: window_ending, or milestone_due
// for MilestoneID (NextDueAt: when the next milestone's reminder is due,
// zero when none is; milestone_due.go).
type Reminded struct {
	Reminder    DeadlineKind `json:"reminder"`
	MilestoneID string       `json:"milestoneId,omitempty"`
	NextDueAt   time.Time    `json:"nextDueAt,omitempty"`
	At          time.Time    `json:"at"`
}

func (Reminded) EventType() string { return "escrow.reminded" }

// remindAt is when the window-ending reminder of a standard escrow paid at
// paidAt with window w is due (zero for other kinds).
func (s State) remindAt(paidAt time.Time, w time.Duration) time.Time {
	if s.Type() != StandardSettlement {
		return time.Time{}
	}
	if w < ReminderLead {
		return paidAt.Add(w / 2)
	}
	return paidAt.Add(w - ReminderLead)
}

// RemindWindowEnding decides the window-ending reminder of an ONGOING
// escrow, once.
func RemindWindowEnding(s State, at time.Time) (Reminded, error) {
	if !s.Exists() || s.RemindAt.IsZero() || s.Reminded || s.Status != Ongoing {
		return Reminded{}, ErrActionNotAllowed
	}
	if at.Before(s.RemindAt) {
		return Reminded{}, ErrNotDue
	}
	return Reminded{Reminder: WindowEndingDeadline, At: at}, nil
}

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

// Window is the delivery window: maxDelivery × deliveryTimeline, plus
// what the buyer's extensions added.
func (s State) Window() time.Duration {
	return time.Duration(s.Terms.MaxDelivery+s.ExtendedBy) * timelineUnits[s.Terms.DeliveryTimeline]
}

// MaxExtensions is how many times a buyer may extend an escrow's window.
const MaxExtensions = 2

// WindowExtended records the buyer's extension of the delivery window by
// By deliveryTimeline units; ReleaseAt is the auto-release's new time
// (zero when the escrow does not auto-release).
type WindowExtended struct {
	By        int       `json:"by"`
	ReleaseAt time.Time `json:"releaseAt,omitempty"`
	// RemindAt is the window-ending reminder's new time (zero once sent).
	RemindAt time.Time `json:"remindAt,omitempty"`
	At       time.Time `json:"at"`
}

func (WindowExtended) EventType() string { return "escrow.window_extended" }

// Errors of window extensions.
var (
	ErrExtensionsUsed   = domain.Invalidf("The delivery window can be extended at most %d times", MaxExtensions)
	ErrExtensionTooLong = domain.Invalidf("Extensions may add at most the original window in total")
)

// ExtendWindow decides the buyer's extension of an ONGOING standard
// escrow's delivery window by by units of its deliveryTimeline: at most
// twice, and by at most the original window in total. The seller's claim
// and an auto-release wait for the new window.
func ExtendWindow(s State, buyerID string, by int, at time.Time) (WindowExtended, error) {
	if !s.Exists() || s.BuyerID == "" || s.BuyerID != buyerID {
		return WindowExtended{}, ErrActionNotAllowed
	}
	if err := s.may(ActExtendWindow); err != nil {
		return WindowExtended{}, err
	}
	switch {
	case by < 1:
		return WindowExtended{}, domain.Invalidf("by must be a positive integer")
	case s.Extensions >= MaxExtensions:
		return WindowExtended{}, ErrExtensionsUsed
	case s.ExtendedBy+by > s.Terms.MaxDelivery:
		return WindowExtended{}, ErrExtensionTooLong
	}
	e := WindowExtended{By: by, At: at}
	added := time.Duration(by) * timelineUnits[s.Terms.DeliveryTimeline]
	if !s.ReleaseAt.IsZero() {
		e.ReleaseAt = s.ReleaseAt.Add(added)
	}
	if !s.Reminded {
		e.RemindAt = s.remindAt(s.PaidAt, s.Window()+added)
	}
	return e, nil
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

// Awaits reports whether the escrow still awaits deadline kind: a
// refusal to act on one it no longer awaits (confirmed, disputed, paid,
// deleted, reminded) is final; any other is a fault to retry.
func (s State) Awaits(kind DeadlineKind) bool {
	switch kind {
	case AutoReleaseDeadline:
		return s.Exists() && s.Status == Ongoing && !s.ReleaseAt.IsZero()
	case ExpiryDeadline:
		return s.Exists() && s.Status == Pending && !s.ExpiresAt.IsZero()
	case WindowEndingDeadline:
		return s.Exists() && s.Status == Ongoing && !s.RemindAt.IsZero() && !s.Reminded
	case MilestoneDueDeadline:
		return s.Exists() && s.Status == Ongoing && !s.MilestoneDueAt.IsZero()
	}
	return false
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

// applyDeadlines folds the events of this file.
func applyDeadlines(s State, ev domain.Event) (State, bool) {
	switch e := ev.(type) {
	case WindowExtended:
		s.Extensions, s.ExtendedBy, s.UpdatedAt = s.Extensions+1, s.ExtendedBy+e.By, e.At
		if !s.ReleaseAt.IsZero() {
			s.ReleaseAt = e.ReleaseAt
		}
		if !s.Reminded {
			s.RemindAt = e.RemindAt
		}
	case Reminded:
		if e.Reminder == MilestoneDueDeadline {
			return applyMilestoneReminded(s, e), true
		}
		s.Reminded, s.UpdatedAt = true, e.At
	default:
		return s, false
	}
	return s, true
}
