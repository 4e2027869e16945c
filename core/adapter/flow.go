package adapter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	slidelimit "github.com/slidelimit/slidelimit/core"
)

// ErrNoLimiter means a request has no limiter: the middleware was built
// with a nil limiter and its limiter choice returned nil too. Flows that
// are not Optional fail such a request with an error wrapping it.
var ErrNoLimiter = errors.New("no limiter for the request")

// Verdict is what an adapter does with a request, as Decide decided it.
type Verdict uint8

// The verdicts of Decide.
const (
	// Pass passes the request on untouched: it was skipped, or it has no
	// limiter and the flow is Optional. Nothing was counted.
	Pass Verdict = iota
	// Admit passes the request on: the limits admitted it, or Redis failed
	// and the limiter's FailurePolicy admitted it (Result.Fallback), or
	// the limiter is in shadow mode (Result.Shadow).
	Admit
	// Deny answers the request as denied (HTTP 429, gRPC
	// ResourceExhausted); Decision.Result is the denial: the limits', or a
	// Local one that FailLocal decided on this process's shares while
	// Redis failed (then Decision.Err holds the Redis error, already given
	// to Hook).
	Deny
	// Fail answers the request as undecidable: Decision.Err says why, and
	// Hook has already been given it. An error wrapping
	// slidelimit.ErrUnavailable is a Redis failure FailClosed denied (HTTP
	// 503, gRPC Unavailable); any other is the server's fault (HTTP 500,
	// gRPC Internal).
	Fail
)

// Decision is what Decide decided for one request.
type Decision struct {
	// Verdict is what the adapter must do.
	Verdict Verdict
	// Result is the limiter's decision; the zero Result when no limiter
	// decided (Pass, and Fail before the limiter was asked).
	Result slidelimit.Result
	// Err is why the request failed, for Fail; for an Admit that Redis
	// could not decide, the Redis error, already given to Hook.
	Err error
	// Identity is the identity the limiter was asked about, "" if none:
	// for a tree (Flow.Tree), its tenant.
	Identity string

	lim  *slidelimit.Limiter // the limiter that decided, for the request's end (Pend)
	cost int                 // the units it was asked to admit
}

// Flow is the decision flow of one middleware over requests of context
// type C, such as *gin.Context or echo.Context. Its fields are its
// settings; a nil function takes the default its doc names. Set them
// before the first Decide, then leave them: a Flow is safe for concurrent
// use while no one changes it.
type Flow[C any] struct {
	// Name is the adapter's package name, such as "ginlimit": errors the
	// flow wraps, and the default Hook's log lines, start with it.
	Name string
	// Limiter decides every request Limiters gives no limiter.
	Limiter *slidelimit.Limiter
	// Limiters chooses the limiter of a request; a nil result means
	// Limiter. Default: always Limiter.
	Limiters func(c C) *slidelimit.Limiter
	// Optional passes a request that has no limiter on unlimited (Pass).
	// Default: false, which fails it with ErrNoLimiter.
	Optional bool
	// Skip exempts the requests on which it returns true (Pass). Default:
	// skips nothing.
	Skip func(c C) bool
	// Key returns the identity a request is limited by. An error, or an
	// empty identity, fails the request with an error wrapping it
	// ("<Name>: key: …"; slidelimit.ErrInvalidKey for an empty one).
	// Required: a nil Key fails every request.
	Key func(c C) (string, error)
	// Cost returns the units a request takes. Default: 1.
	Cost func(c C) int
	// Limits returns the limits a request is held to instead of the
	// limiter's own, such as the quota of a tenant's plan read from a token
	// (slidelimit.Limiter.AllowLimits): every limit counts the identity's
	// one log, so plans may differ from request to request and a changed
	// plan keeps its count. None: the limiter's own. Invalid limits fail
	// the request with an error wrapping slidelimit.ErrInvalidLimit.
	// Default: the limiter's own.
	Limits func(c C) []slidelimit.Limit
	// Tree returns the tenant a request belongs to and the levels of its
	// tree, such as its organisation's, its team's and its API key's
	// limits, decided at once by slidelimit.Limiter.AllowTree: the request
	// is admitted only if every level has room, and a denial records
	// nothing at any level. When set, it takes the place of Key and
	// Limits. An error, or an empty tenant, fails the request as Key's do
	// (a *KeyError, "<Name>: key: …"); an invalid tree fails it with the
	// limiter's error (slidelimit.ErrInvalidLimit, ErrInvalidKey).
	// Everything else is as for a flat limit: Cost, SetHeaders (each
	// level's limits are listed, the one that bound the decision in
	// Result.Limit), Settle, the refunds and the places in flight act on
	// every level. Default: none, Key and Limits.
	Tree func(c C) (tenant string, levels []slidelimit.Level, err error)
	// SetHeaders writes res's rate-limit header fields on c's response,
	// usually with slidelimit.Headers.SetHeader or Write. It is called once
	// the limiter has decided, for Admit, Deny and a Fail the limiter
	// returned. Default: no fields (an adapter such as gRPC's that places
	// them itself).
	SetHeaders func(c C, res slidelimit.Result)
	// Hook receives every error the flow meets: Redis failures, admitted
	// (fail-open) or not, key, cost and limiter-choice errors, failed
	// refunds. Default: LogError.
	Hook func(ctx context.Context, c C, err error)
	// RefundFailed gives back the units of an admitted request whose
	// status Failed deems failed, when the request ends (Pending.End).
	RefundFailed bool
	// RefundSuccessful gives back the units of an admitted request whose
	// status Failed deems not failed.
	RefundSuccessful bool
	// Failed reports whether a status makes a request failed, for the
	// refunds. Default: HTTPFailed, 400 and above.
	Failed func(status int) bool
	// Settle returns the actual cost of an admitted request from its
	// response, once the request has ended, and whether it knows it: the
	// total_tokens of an LLM's usage (httplimit.TotalTokens), a header a
	// handler set. The request is then settled to it
	// (slidelimit.Limiter.Settle), which also releases its places in
	// flight; when it does not know, the request keeps the cost it was
	// admitted for. A request that a refund setting gives back is not
	// settled. The adapter gives it the body only when Settle is set, and
	// only its last MaxBody bytes (see Pending). For a request a Hold kept
	// beyond its handler, the framework may have reused c by the time
	// Settle runs. Default: none.
	Settle func(c C, r Response) (actual int, ok bool)
}

// HTTPFailed reports whether an HTTP status makes a request failed by
// default: 400 and above.
func HTTPFailed(status int) bool { return status >= 400 }

// Decide runs the flow for the request c, whose context is ctx, and
// returns what the adapter must do with it. Errors go to Hook before
// Decide returns.
func (f *Flow[C]) Decide(ctx context.Context, c C) Decision {
	if f.Skip != nil && f.Skip(c) {
		return Decision{}
	}
	return f.Limit(ctx, c)
}

// Limit is Decide without the Skip step, for an adapter that has asked
// Skip itself, such as the gRPC stream interceptor, whose skipped streams
// skip its message limit too.
func (f *Flow[C]) Limit(ctx context.Context, c C) Decision {
	lim := f.Limiter
	if f.Limiters != nil {
		if chosen := f.Limiters(c); chosen != nil {
			lim = chosen
		}
	}
	if lim == nil {
		if f.Optional {
			return Decision{}
		}
		return f.fail(ctx, c, fmt.Errorf("%s: %w", f.Name, ErrNoLimiter))
	}
	if f.Tree != nil {
		tenant, levels, err := f.tree(c)
		if err != nil {
			return f.fail(ctx, c, err)
		}
		cost := f.cost(c)
		res, err := lim.AllowTree(ctx, tenant, cost, levels...)
		return f.decided(ctx, c, lim, tenant, cost, res, err)
	}
	id, err := f.Identify(c)
	if err != nil {
		return f.fail(ctx, c, err)
	}
	return f.Check(ctx, c, lim, id, f.cost(c))
}

// cost returns the units Cost gives c, 1 without Cost.
func (f *Flow[C]) cost(c C) int {
	if f.Cost == nil {
		return 1
	}
	return f.Cost(c)
}

// tree returns the tenant and the levels Tree gives c, or the *KeyError
// that fails it: Tree's error, or one wrapping slidelimit.ErrInvalidKey
// for an empty tenant.
func (f *Flow[C]) tree(c C) (string, []slidelimit.Level, error) {
	tenant, levels, err := f.Tree(c)
	if err != nil {
		return "", nil, &KeyError{Name: f.Name, Err: err}
	}
	if tenant == "" {
		return "", nil, &KeyError{Name: f.Name, Err: fmt.Errorf("%w: empty tenant", slidelimit.ErrInvalidKey)}
	}
	return tenant, levels, nil
}

// Identify returns the identity Key gives c, or the *KeyError that fails
// it: Key's error, or one wrapping slidelimit.ErrInvalidKey for an empty
// identity or a nil Key. It does not report the error.
func (f *Flow[C]) Identify(c C) (string, error) {
	if f.Key == nil {
		return "", &KeyError{Name: f.Name, Err: fmt.Errorf("%w: no key function", slidelimit.ErrInvalidKey)}
	}
	id, err := f.Key(c)
	if err != nil {
		return "", &KeyError{Name: f.Name, Err: err}
	}
	if id == "" {
		return "", &KeyError{Name: f.Name, Err: fmt.Errorf("%w: empty identity", slidelimit.ErrInvalidKey)}
	}
	return id, nil
}

// KeyError is the error of a request whose key function failed or gave
// an empty identity, or whose tree function (Flow.Tree) failed or gave an
// empty tenant: "<Name>: key: " and Err.
type KeyError struct {
	// Name is the adapter's name, as in Flow.Name.
	Name string
	// Err is the key function's error.
	Err error
}

// Error returns "<Name>: key: " and Err's message.
func (e *KeyError) Error() string { return e.Name + ": key: " + e.Err.Error() }

// Unwrap returns Err.
func (e *KeyError) Unwrap() error { return e.Err }

// Check runs the last steps of the flow, from the limiter's decision on:
// it asks lim to admit cost units for id, writes the header fields and
// reports errors, as Decide does once it has chosen the limiter, the key
// and the cost of a request that has no Tree. Adapters that count
// something of their own, such as the messages of a gRPC stream, call it
// directly; it never asks Tree.
func (f *Flow[C]) Check(ctx context.Context, c C, lim *slidelimit.Limiter, id string, cost int) Decision {
	var limits []slidelimit.Limit
	if f.Limits != nil {
		limits = f.Limits(c)
	}
	res, err := lim.AllowLimits(ctx, id, cost, limits...)
	return f.decided(ctx, c, lim, id, cost, res, err)
}

// decided runs the steps after the limiter's decision, for a flat limit
// and a tree alike: it writes res's header fields, reports err and
// returns the Decision.
func (f *Flow[C]) decided(ctx context.Context, c C, lim *slidelimit.Limiter, id string, cost int, res slidelimit.Result, err error) Decision {
	if f.SetHeaders != nil {
		f.SetHeaders(c, res)
	}
	d := Decision{Verdict: Admit, Result: res, Err: err, Identity: id, lim: lim, cost: cost}
	if err != nil {
		f.hook(ctx, c, err)
	}
	switch {
	case res.Allowed:
	case res.Local, err == nil:
		d.Verdict = Deny
	default:
		d.Verdict = Fail
	}
	return d
}

// fail reports err and returns a Fail decision for it.
func (f *Flow[C]) fail(ctx context.Context, c C, err error) Decision {
	f.hook(ctx, c, err)
	return Decision{Verdict: Fail, Err: err}
}

func (f *Flow[C]) hook(ctx context.Context, c C, err error) {
	if f.Hook != nil {
		f.Hook(ctx, c, err)
		return
	}
	LogError(ctx, f.Name, err)
}

// LogError is every adapter's default error hook: it logs err with
// slog.Default at level Error, as "<name>: rate limit" with attrs, but
// for an error wrapping slidelimit.ErrUnavailable, which the limiter
// reports itself once per outage (slidelimit.WithLogger) rather than once
// per request.
func LogError(ctx context.Context, name string, err error, attrs ...any) {
	if errors.Is(err, slidelimit.ErrUnavailable) {
		return
	}
	slog.ErrorContext(ctx, name+": rate limit", append(attrs, "err", err)...)
}
