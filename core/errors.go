package slidelimit

import (
	"errors"

	"github.com/slidelimit/slidelimit/core/internal/roundtrip"
)

// Errors returned by this package. Test for them with errors.Is: the errors
// returned wrap them with the details of what went wrong.
var (
	// ErrInvalidLimit means a Limit is out of range or badly named.
	ErrInvalidLimit = errors.New("slidelimit: invalid limit")
	// ErrInvalidCost means a cost is below 1 or above the smallest quota,
	// so the request could never be admitted.
	ErrInvalidCost = errors.New("slidelimit: invalid cost")
	// ErrInvalidKey means an identity is empty. Identities of any other
	// content are made safe and never fail.
	ErrInvalidKey = errors.New("slidelimit: invalid key")
	// ErrInvalidOption means an Option was given a value it cannot take.
	ErrInvalidOption = errors.New("slidelimit: invalid option")
	// ErrUnavailable means Redis failed, timed out or replied in a way the
	// limiter does not understand. A call that returns it also returns the
	// Result chosen by the FailurePolicy, with Result.Fallback set.
	ErrUnavailable = errors.New("slidelimit: redis unavailable")
	// ErrLeaseEnded means Renew found a request's place in flight gone:
	// its lease ended before it was renewed.
	ErrLeaseEnded = errors.New("slidelimit: lease ended")
	// ErrPastHorizon means Settle, Refund or Shift came after a stepped
	// limit had forgotten the request while its units still count: a
	// stepped log keeps a request's id for the shorter of its window and
	// 15 minutes, and this one is older. Its other limits took the
	// correction; that one still counts the request as admitted. Exact
	// limits know a request as long as it counts.
	ErrPastHorizon = errors.New("slidelimit: request past its stepped limit's horizon")
	// ErrCircuitOpen means the limiter did not ask Redis because its circuit
	// breaker is open after repeated failures (see WithBreaker). Errors that
	// wrap it also wrap ErrUnavailable.
	ErrCircuitOpen = roundtrip.ErrCircuitOpen
)
