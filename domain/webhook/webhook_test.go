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
