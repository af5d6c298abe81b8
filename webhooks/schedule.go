package webhooks

import "time"

// DefaultSchedule is the pause before each retry: a message is tried
// once, then again after each of these (± Jitter), then marked failed.
var DefaultSchedule = []time.Duration{
	5 * time.Second, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour,
	5 * time.Hour, 10 * time.Hour, 10 * time.Hour, 24 * time.Hour,
}

// Jitter is the relative spread of a retry pause (±10 %), so that messages
// that failed together do not all retry at the same instant.
const Jitter = 0.10

// NextDelay is the pause after failed attempt number attempt (1-based) under
// schedule, spread by u, a uniform random number in [0, 1). ok is false when
// the schedule is exhausted: the message has failed.
func NextDelay(schedule []time.Duration, attempt int, u float64) (time.Duration, bool) {
	if attempt < 1 || attempt > len(schedule) {
		return 0, false
	}
	d := schedule[attempt-1]
	return time.Duration(float64(d) * (1 - Jitter + 2*Jitter*u)), true
}
