package domain

import "unicode/utf8"

// Bounds on what one request may store. The log is append-only and kept
// for ever, so every field that reaches an event has a cap, and an event
// as a whole has one too: a field without a cap would let one key grow
// every replay, projection rebuild and webhook of the tenant without limit.
const (
	// MaxURL bounds every URL a client gives (callback, return and image
	// URLs), in characters.
	MaxURL = 2048
	// MaxEventBytes bounds one stored event, its data and metadata
	// together. The field caps keep every event far below it; an event
	// over it is refused whole rather than stored.
	MaxEventBytes = 64 << 10
)

// ErrEventTooLarge refuses a change whose event would pass MaxEventBytes.
var ErrEventTooLarge = &Error{Code: TooLarge, Message: "The change is too large to record"}

// CheckURLLength refuses a URL field over MaxURL characters.
func CheckURLLength(field, u string) error {
	if utf8.RuneCountInString(u) > MaxURL {
		return Invalidf("%s must be at most %d characters", field, MaxURL)
	}
	return nil
}
