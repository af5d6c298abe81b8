package webhooks

import (
	"reflect"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain/escrow"
)

// The service's window-ending reminder is announced as
// escrow.window_ending; it changes no status, so announces nothing else.
func TestReminderAnnouncesWindowEnding(t *testing.T) {
	before := escrow.State{ID: "e1", MerchantID: "m1", Status: escrow.Ongoing}
	ev := escrow.Reminded{Reminder: escrow.WindowEndingDeadline, At: time.Unix(1, 0)}
	after := escrow.Apply(before, ev)
	if got := EscrowEvents(ev, before, after); !reflect.DeepEqual(got, []string{"escrow.window_ending"}) {
		t.Fatalf("EscrowEvents = %v", got)
	}
	// A milestone's reminder is escrow.milestone_due.
	due := escrow.Reminded{Reminder: escrow.MilestoneDueDeadline, MilestoneID: "m1", At: time.Unix(1, 0)}
	if got := EscrowEvents(due, before, escrow.Apply(before, due)); !reflect.DeepEqual(got, []string{"escrow.milestone_due"}) {
		t.Fatalf("EscrowEvents = %v", got)
	}
	// An extension announces nothing.
	ext := escrow.WindowExtended{By: 1, At: time.Unix(2, 0)}
	if got := EscrowEvents(ext, after, escrow.Apply(after, ext)); got != nil {
		t.Fatalf("extension announces %v", got)
	}
}

// A partial refund changes no status: it announces
// escrow.partially_refunded, and nothing else.
func TestPartialRefundAnnouncesItself(t *testing.T) {
	before := escrow.State{ID: "e1", MerchantID: "m1", Status: escrow.Ongoing}
	ev := escrow.PartiallyRefunded{Amount: 100, RefundedBy: "m1", At: time.Unix(1, 0)}
	if got := EscrowEvents(ev, before, escrow.Apply(before, ev)); !reflect.DeepEqual(got, []string{"escrow.partially_refunded"}) {
		t.Fatalf("EscrowEvents = %v", got)
	}
}
