package webhook

import (
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain/domaintest"
)

// TestDeliveryFoldsItsRedeliveries: each redelivery asked of a delivery
// counts once, and its event decodes as it was recorded.
func TestDeliveryFoldsItsRedeliveries(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	events := domaintest.RoundTrip(t, Registry,
		RedeliveryRequested{DeliveryID: "d1", Event: "payment.deposit.success", RequestedAt: at},
		RedeliveryRequested{DeliveryID: "d1", Event: "payment.deposit.success", RequestedAt: at.Add(time.Minute)})
	for _, tc := range []struct {
		name string
		n    int
		want Delivery
	}{
		{"none", 0, Delivery{}},
		{"one", 1, Delivery{ID: "d1", Redelivered: 1}},
		{"two", 2, Delivery{ID: "d1", Redelivered: 2}},
	} {
		var s Delivery
		for _, ev := range events[:tc.n] {
			s = Apply(s, ev)
		}
		if s != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, s, tc.want)
		}
	}
}

// TestRedeliverIsBounded: a delivery is redelivered by hand at most
// MaxRedeliveries times, counted by its stream or by the outbox, whichever
// has counted more.
func TestRedeliverIsBounded(t *testing.T) {
	ev := RedeliveryRequested{DeliveryID: "d1", Event: "payment.deposit.success", RequestedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	for _, tc := range []struct {
		name           string
		stream, outbox int
		err            error
	}{
		{"never redelivered", 0, 0, nil},
		{"one left by both counts", MaxRedeliveries - 1, MaxRedeliveries - 1, nil},
		{"the stream has counted them all", MaxRedeliveries, 0, ErrRedeliveriesExhausted},
		{"the outbox has counted them all", 2, MaxRedeliveries, ErrRedeliveriesExhausted},
		{"past the bound", MaxRedeliveries + 1, MaxRedeliveries + 1, ErrRedeliveriesExhausted},
	} {
		want := ev
		if tc.err != nil {
			want = RedeliveryRequested{}
		}
		got, err := Redeliver(Delivery{ID: "d1", Redelivered: tc.stream}, tc.outbox, ev)
		if err != tc.err || got != want {
			t.Errorf("%s: decided %+v, %v; want %+v, %v", tc.name, got, err, want, tc.err)
		}
	}
}
