// Package problem is the one error type the domain packages return when the
// caller did something the service must refuse. Each error carries a stable
// Code; the HTTP edge (package httpx) owns the single table that turns codes
// into statuses and RFC 9457 problem documents, so no domain package knows
// about HTTP and no internal detail reaches a client by accident.
package problem

import (
	"errors"
	"fmt"
	"time"
)

// Code is the machine-readable "code" member of a problem document. The
// values are part of the API contract: clients switch on them.
type Code string

// The codes of the API contract (API.md, "Errors").
const (
	Invalid              Code = "invalid_request"
	MethodNotAllowed     Code = "method_not_allowed"
	IdempotencyRequired  Code = "idempotency_key_required"
	Unauthenticated      Code = "unauthenticated"
	Forbidden            Code = "forbidden"
	NotFound             Code = "not_found"
	AlreadyExists        Code = "already_exists"
	OutOfStock           Code = "out_of_stock"
	InvalidState         Code = "invalid_state"
	SeatUnavailable      Code = "seat_unavailable"
	HoldLimitReached     Code = "hold_limit_reached"
	HoldExpired          Code = "hold_expired"
	RequestInProgress    Code = "request_in_progress"
	ResourceBusy         Code = "resource_busy"
	PaymentDeclined      Code = "payment_declined"
	VersionMismatch      Code = "version_mismatch"
	PreconditionRequired Code = "precondition_required"
	PayloadTooLarge      Code = "payload_too_large"
	IdempotencyReused    Code = "idempotency_key_reused"
	// RefundExceedsRemaining is a refund of more than the order has left
	// to refund; the problem carries remaining_cents.
	RefundExceedsRemaining Code = "refund_exceeds_remaining"
	RateLimited            Code = "rate_limited"
	Unavailable            Code = "unavailable"
)

// Error is a refusal with a code and a human-readable detail.
//
// Two errors are the same for errors.Is when their codes match, so a domain
// package can declare a sentinel (ErrOutOfStock) and still return a copy
// with a precise detail ("SKU-1: 0 available, 2 requested").
type Error struct {
	Code   Code
	Detail string
	// RetryAfter, when set, is sent as the Retry-After header. An error that
	// carries it is transient: the same request may succeed later, so its
	// answer is never stored as an idempotent result.
	RetryAfter time.Duration
	// Extra members are added to the problem document (for example the
	// list of unavailable seats).
	Extra map[string]any
}

// New returns an error with the given code and detail.
func New(code Code, detail string) *Error {
	return &Error{Code: code, Detail: detail}
}

// Errorf returns an error with the given code and a formatted detail.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Detail: fmt.Sprintf(format, args...)}
}

func (e *Error) Error() string {
	if e.Detail == "" {
		return string(e.Code)
	}
	return string(e.Code) + ": " + e.Detail
}

// Is reports whether target is a *Error with the same code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// As returns the *Error in err's chain, if any.
func As(err error) (*Error, bool) {
	var p *Error
	ok := errors.As(err, &p)
	return p, ok
}

// CodeOf returns the code of the *Error in err's chain, or "" if there is none.
func CodeOf(err error) Code {
	if p, ok := As(err); ok {
		return p.Code
	}
	return ""
}

// Transient reports whether err asks the client to retry later.
func Transient(err error) bool {
	p, ok := As(err)
	return ok && p.RetryAfter > 0
}
