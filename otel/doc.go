// Package otellimit reports the decisions of slidelimit limiters through
// OpenTelemetry: as metric instruments, and as an event on the span of the
// request each decision was made for.
//
// Create one Metrics and give each limiter its observer under a name of
// your choosing:
//
//	m, err := otellimit.New() // the global MeterProvider; see WithMeterProvider
//	if err != nil {
//		return err
//	}
//	lim, err := slidelimit.New(rdb, slidelimit.PerMinute(100),
//		slidelimit.WithObserver(m.Observer("api")))
//
// The instruments are
//
//	slidelimit.decisions          Int64Counter      {decision}
//	slidelimit.decision.duration  Float64Histogram  s
//
// with the attributes slidelimit.limiter (the name given to Observer),
// slidelimit.limit (the deciding limit, slidelimit.Limit.String) and, on
// the counter, slidelimit.outcome (slidelimit.Observation.Outcome: allowed,
// denied, shadow_denied, fallback_allowed, fallback_denied, cached_denied
// or error). They are the series package promlimit exports, under
// OpenTelemetry's naming. No attribute holds an identity.
//
// When the context of a decision carries a recording span, the observer
// adds the event slidelimit.decision to it, with the same attributes and
// slidelimit.cost, slidelimit.remaining and slidelimit.retry_after (in
// seconds); WithoutSpanEvents turns this off. The span is the caller's: a
// tracing middleware (otelhttp, otelgin, otelgrpc, ...) in front of the
// rate-limit middleware provides it.
package otellimit
