// Package domain holds what every aggregate shares: typed errors, events,
// money and reference data. It is pure: no database, HTTP, logging or clock.
package domain

import (
	"errors"
	"fmt"
)

// Code classifies an error; httpapi maps each code to one HTTP status.
type Code string

const (
	Invalid         Code = "invalid"         // 400: the request breaks a rule
	Unauthenticated Code = "unauthenticated" // 401 with the error's message
	Forbidden       Code = "forbidden"       // 403
	NotFound        Code = "not_found"       // 404
	Conflict        Code = "conflict"        // 409
	Gone            Code = "gone"            // 410
	TooLarge        Code = "too_large"       // 413
	Unavailable     Code = "unavailable"     // 503
	Internal        Code = "internal"        // 500
)

// Error is the one error type the API shows to clients: a code and the exact
// client-facing message.
type Error struct {
	Code    Code
	Message string
	// Resumable says that repeating the same request finishes what this one
	// started (a payout whose provider did not answer): an Idempotency-Key
	// is released for that repeat instead of replaying this answer.
	Resumable bool
}

func (e *Error) Error() string { return e.Message }

// Errorf builds an *Error.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Invalidf is the common 400 rule violation.
func Invalidf(format string, args ...any) *Error { return Errorf(Invalid, format, args...) }

// ErrorCode returns the code of err, Internal for anything not an *Error.
func ErrorCode(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return Internal
}

// ErrorMessage returns the client-facing message of err.
func ErrorMessage(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	return "Internal server error"
}

// IsResumable reports whether err is an *Error marked Resumable.
func IsResumable(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Resumable
}
