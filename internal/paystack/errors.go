package paystack

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// ErrUncertain is wrapped by every error after which the caller cannot know
// whether the request took effect at Paystack: a timeout, a connection lost
// after the request was sent, a 5xx answer, or an answer that could not be
// read. A transfer or a charge behind such an error must be verified by its
// reference before anything is concluded from it.
var ErrUncertain = errors.New("paystack: outcome unknown")

// ErrUnreachable is wrapped by an error after which the request certainly
// did not reach Paystack (the connection could not be opened): nothing
// took effect.
var ErrUnreachable = errors.New("paystack: unreachable")

// APIError is a refusal Paystack answered: a 4xx (or a 2xx whose body said
// status false). Its text carries Paystack's message, never a credential.
type APIError struct {
	HTTPStatus int
	Message    string
	// Code is Paystack's machine-readable `code` when the answer had one
	// ("invalid_transfer_recipient", "duplicate_reference", ...).
	Code string
	// Type is Paystack's `type` when present: "validation_error",
	// "processor_error" or "api_error".
	Type string
	// NextStep is Paystack's meta.nextStep hint when present.
	NextStep string
	// Op names the operation that was refused (one of the Op constants).
	Op string
	// answered: the refusal came in Paystack's answer shape, not as a
	// bare status from something in between.
	answered bool
}

func (e *APIError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "paystack %s: %d", e.Op, e.HTTPStatus)
	if e.Message != "" {
		b.WriteString(" ")
		b.WriteString(e.Message)
	}
	if e.Code != "" {
		fmt.Fprintf(&b, " (%s)", e.Code)
	}
	return b.String()
}

// uncertainError is an APIError-less failure whose outcome is unknown: it
// matches ErrUncertain and keeps the cause (and, for a 5xx, the answer).
type uncertainError struct {
	op     string
	status int    // the 5xx status, or 0 when no answer was read
	msg    string // Paystack's message of a 5xx, when it sent one
	cause  error
}

func (e *uncertainError) Error() string {
	switch {
	case e.status != 0 && e.msg != "":
		return fmt.Sprintf("paystack %s: outcome unknown: %d %s", e.op, e.status, e.msg)
	case e.status != 0:
		return fmt.Sprintf("paystack %s: outcome unknown: %d %s", e.op, e.status, http.StatusText(e.status))
	default:
		return fmt.Sprintf("paystack %s: outcome unknown: %v", e.op, e.cause)
	}
}

func (e *uncertainError) Is(target error) bool { return target == ErrUncertain }
func (e *uncertainError) Unwrap() error        { return e.cause }

// unreachableError says the request was never sent.
type unreachableError struct {
	op    string
	cause error
}

func (e *unreachableError) Error() string {
	return fmt.Sprintf("paystack %s: unreachable: %v", e.op, e.cause)
}
func (e *unreachableError) Is(target error) bool { return target == ErrUnreachable }
func (e *unreachableError) Unwrap() error        { return e.cause }

// duplicateCodes are the codes Paystack gives a reference already used.
var duplicateCodes = map[string]bool{
	"duplicate_reference":          true,
	"duplicate_transfer_reference": true,
}

// IsDuplicateReference reports whether err is Paystack's refusal of a
// reference already used: a transfer (or a transaction) with that
// reference exists. For a transfer it means an earlier call with the same
// reference was accepted, whatever its answer said: read it back with
// VerifyTransfer; never pay again under another reference.
//
// Paystack documents the refusal ("this reference has already been used on
// a prior transfer") but not one fixed message, so the check accepts its
// documented code and the wordings it is known to use.
func IsDuplicateReference(err error) bool {
	var ae *APIError
	if !errors.As(err, &ae) || ae.HTTPStatus < 400 || ae.HTTPStatus >= 500 {
		return false
	}
	if duplicateCodes[ae.Code] {
		return true
	}
	m := strings.ToLower(ae.Message)
	return strings.Contains(m, "reference") &&
		(strings.Contains(m, "duplicate") || strings.Contains(m, "already exists") || strings.Contains(m, "already been used"))
}

// IsNotFound reports whether err is Paystack's answer that the thing asked
// for (a transaction or transfer reference, a customer) does not exist. A
// verify that answers not found means Paystack has no record of it: the
// request never took effect.
func IsNotFound(err error) bool {
	var ae *APIError
	if !errors.As(err, &ae) || !ae.answered {
		// A bare 404 (a wrong base URL, a proxy) says nothing about a
		// reference.
		return false
	}
	if ae.HTTPStatus == http.StatusNotFound {
		return true
	}
	m := strings.ToLower(ae.Message)
	return ae.HTTPStatus == http.StatusBadRequest && strings.Contains(m, "not found")
}
