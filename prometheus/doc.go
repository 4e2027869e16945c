// Package promlimit exports the decisions of slidelimit limiters as
// Prometheus metrics.
//
// Create one Metrics, register it, and give each limiter its observer under
// a name of your choosing:
//
//	m := promlimit.New()
//	prometheus.MustRegister(m)
//	lim, err := slidelimit.New(rdb, slidelimit.PerMinute(100),
//		slidelimit.WithObserver(m.Observer("api")))
//
// Metrics collects two series families:
//
//	slidelimit_decisions_total{limiter, limit, outcome}    counter
//	slidelimit_decision_duration_seconds{limiter}          histogram
//
// limiter is the name given to Observer, limit the deciding limit
// (slidelimit.Limit.String, such as "100/1m", or the limit's name), and
// outcome one of slidelimit.Observation.Outcome's values: allowed, denied,
// shadow_denied, fallback_allowed, fallback_denied, cached_denied, error.
// No label holds an identity, so the number of series is bounded by the
// limiters and limits a service defines. Each limit's seven outcome series
// start at zero the first time the limit decides, so ratios over them are
// defined from the start.
package promlimit
