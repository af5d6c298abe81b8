// Package promreg registers Prometheus collectors so that several users of
// one registry in a process (servers, dispatchers) share the instruments.
package promreg

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Shared registers c on reg and returns it; when an identical collector is
// already registered it returns that one instead. Any other registration
// error is a programming error and panics.
func Shared[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic(err)
	}
	return c
}
