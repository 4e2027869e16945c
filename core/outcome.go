package slidelimit

import "context"

// Outcome classifies a decision for metrics: one of the Outcome constants.
// It is a short snake_case string, fit for a metric label.
type Outcome string

// The outcomes of a decision, as Observation.Outcome reports them.
const (
	// OutcomeAllowed is a request the limits admitted.
	OutcomeAllowed Outcome = "allowed"
	// OutcomeDenied is a request the limits denied.
	OutcomeDenied Outcome = "denied"
	// OutcomeShadowDenied is a request the limits denied and shadow mode
	// admitted (Result.Shadow; see WithShadow).
	OutcomeShadowDenied Outcome = "shadow_denied"
	// OutcomeFallbackAllowed is a request the FailurePolicy admitted
	// because Redis could not decide it (Result.Fallback).
	OutcomeFallbackAllowed Outcome = "fallback_allowed"
	// OutcomeFallbackDenied is a request the FailurePolicy denied because
	// Redis could not decide it (Result.Fallback).
	OutcomeFallbackDenied Outcome = "fallback_denied"
	// OutcomeCachedDenied is a request denied by the limiter's local deny
	// cache without asking Redis (Result.Cached).
	OutcomeCachedDenied Outcome = "cached_denied"
	// OutcomeError is a call that could not be decided for a reason other
	// than Redis: an invalid identity (ErrInvalidKey) or cost
	// (ErrInvalidCost).
	OutcomeError Outcome = "error"
)

// Outcome classifies the decision o describes. A Fallback Result is
// OutcomeFallbackAllowed or OutcomeFallbackDenied, any other call that
// returned an error OutcomeError. A request shadow mode admitted is
// OutcomeShadowDenied, also when the deny cache answered it.
func (o Observation) Outcome() Outcome {
	r := o.Result
	switch {
	case r.Fallback && r.Allowed:
		return OutcomeFallbackAllowed
	case r.Fallback:
		return OutcomeFallbackDenied
	case o.Err != nil:
		return OutcomeError
	case r.Shadow:
		return OutcomeShadowDenied
	case r.Allowed:
		return OutcomeAllowed
	case r.Cached:
		return OutcomeCachedDenied
	}
	return OutcomeDenied
}

// joinObservers returns an Observer that calls a, then b; either may be nil.
func joinObservers(a, b Observer) Observer {
	if a == nil {
		return b
	}
	if b == nil {
		return a
	}
	return func(ctx context.Context, o Observation) {
		a(ctx, o)
		b(ctx, o)
	}
}

// ShadowDenied returns the shadow limits (Limit.Shadow) of the decision
// that would have denied the request had they been enforced, in the order
// of its Statuses: the metrics of a limit being rolled out count an
// OutcomeShadowDenied for each. Only a request the enforced limits admitted
// counts: one they denied (Allowed unset, or Result.Shadow under
// WithShadow) was denied whatever the shadow limits say, so it returns
// nil, and the count is what enforcing them would add.
func (o Observation) ShadowDenied() []Limit {
	if !o.Result.Allowed || o.Result.Shadow {
		return nil
	}
	var out []Limit
	for _, s := range o.Result.Statuses {
		if s.Limit.Shadow && s.RetryAfter > 0 {
			out = append(out, s.Limit)
		}
	}
	return out
}
