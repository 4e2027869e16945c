package slidelimit

// WithShadow runs the limiter in shadow mode, to roll a limit out safely:
// every request is decided as usual, but one the limits deny is admitted
// anyway, as a Result with Allowed and Shadow set. Such a request is
// recorded nowhere, since the script records admissions only and this one
// was denied, so it never uses up quota that later requests would have had.
// Observers see it, Observation.Outcome reports OutcomeShadowDenied, and
// Headers writes no field for it, so middleware sends neither 429 nor
// quota fields. Peek reports such a request the same way.
//
// Shadow mode changes denials by the limits only. When Redis cannot decide,
// the FailurePolicy still does, so a shadow rollout that must never refuse
// a request keeps FailOpen, the default. The default is no shadow mode.
func WithShadow() Option {
	return func(c *config) error {
		c.shadow = true
		return nil
	}
}

// shadowed applies shadow mode to a decision: a denial by the limits,
// returned without an error, becomes an admission marked Shadow. Errors and
// FailurePolicy decisions (Fallback) are left alone.
func (l *Limiter) shadowed(res Result, err error) Result {
	if l.cfg.shadow && !res.Allowed && !res.Fallback && err == nil {
		res.Allowed, res.Shadow = true, true
	}
	return res
}
