package httpapi_test

import (
	"github.com/escrowd/escrowd/httpapi"
	"github.com/escrowd/escrowd/internal/wiring"
)

// The tests of package httpapi build the service through the process
// wiring (see Wiring in wiring_test.go).
func init() {
	httpapi.SetWiring(httpapi.Wiring{API: wiring.API, Subscriber: wiring.Subscriber,
		SubscriberRunner: wiring.SubscriberRunner, Endpoints: wiring.Endpoints, Sealer: wiring.Sealer,
		Deadlines: wiring.DeadlineScheduler, Sealed: wiring.Sealed})
}
