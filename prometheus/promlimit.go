package promlimit

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	slidelimit "github.com/slidelimit/slidelimit/core"
)

// DefaultBuckets are the upper bounds, in seconds, of the decision duration
// histogram unless WithBuckets sets others: 100 µs to 250 ms. A decision
// takes one Redis round trip, usually well under a millisecond on a local
// network; the upper buckets catch a slow Redis before the limiter's
// timeout (slidelimit.DefaultTimeout, 100 ms) cuts it off.
var DefaultBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25}

// outcomes lists every value of slidelimit.Outcome, so that each limit's
// series start at zero.
var outcomes = []slidelimit.Outcome{
	slidelimit.OutcomeAllowed,
	slidelimit.OutcomeDenied,
	slidelimit.OutcomeShadowDenied,
	slidelimit.OutcomeFallbackAllowed,
	slidelimit.OutcomeFallbackDenied,
	slidelimit.OutcomeCachedDenied,
	slidelimit.OutcomeError,
}

// Metrics counts the decisions of any number of limiters and times them. It
// is a prometheus.Collector: register it once, and give each limiter the
// Observer of its name. It is safe for concurrent use.
type Metrics struct {
	decisions *prometheus.CounterVec
	duration  *prometheus.HistogramVec
}

// Option configures Metrics in New.
type Option func(*config)

type config struct {
	buckets     []float64
	constLabels prometheus.Labels
}

// WithBuckets sets the upper bounds, in seconds, of the decision duration
// histogram's buckets. The default is DefaultBuckets.
func WithBuckets(buckets ...float64) Option {
	return func(c *config) { c.buckets = buckets }
}

// WithConstLabels adds labels with fixed values to every series, such as
// the region a service runs in. None may be named limiter, limit or
// outcome. The default is none.
func WithConstLabels(labels prometheus.Labels) Option {
	return func(c *config) { c.constLabels = labels }
}

// New returns Metrics, to be registered with a prometheus.Registerer.
func New(opts ...Option) *Metrics {
	cfg := config{buckets: DefaultBuckets}
	for _, opt := range opts {
		opt(&cfg)
	}
	return &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "slidelimit_decisions_total",
			Help:        "Rate-limit decisions, by limiter, deciding limit and outcome.",
			ConstLabels: cfg.constLabels,
		}, []string{"limiter", "limit", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:        "slidelimit_decision_duration_seconds",
			Help:        "Time taken by rate-limit decisions, Redis round trip included.",
			ConstLabels: cfg.constLabels,
			Buckets:     cfg.buckets,
		}, []string{"limiter"}),
	}
}

// Observer returns the slidelimit.Observer that records the decisions of
// the limiter named limiter, for slidelimit.WithObserver. The name is a
// label value: keep it short and fixed, such as "api" or "login". Limiters
// may share a name, and then share their series.
func (m *Metrics) Observer(limiter string) slidelimit.Observer {
	duration := m.duration.WithLabelValues(limiter)
	var byLimit sync.Map // slidelimit.Limit → map[slidelimit.Outcome]prometheus.Counter
	count := func(limit slidelimit.Limit, outcome slidelimit.Outcome) {
		counters, ok := byLimit.Load(limit)
		if !ok {
			counters, _ = byLimit.LoadOrStore(limit, m.counters(limiter, limit.String()))
		}
		if c, ok := counters.(map[slidelimit.Outcome]prometheus.Counter)[outcome]; ok {
			c.Inc()
		} else {
			// An outcome added to slidelimit after this package was built.
			m.decisions.WithLabelValues(limiter, limit.String(), string(outcome)).Inc()
		}
	}
	return func(_ context.Context, o slidelimit.Observation) {
		count(o.Result.Limit, o.Outcome())
		// A shadow limit being rolled out counts its would-be denials.
		for _, limit := range o.ShadowDenied() {
			count(limit, slidelimit.OutcomeShadowDenied)
		}
		duration.Observe(o.Latency.Seconds())
	}
}

// counters returns the counter of each outcome of one limit, created at zero.
func (m *Metrics) counters(limiter, limit string) map[slidelimit.Outcome]prometheus.Counter {
	cs := make(map[slidelimit.Outcome]prometheus.Counter, len(outcomes))
	for _, o := range outcomes {
		cs[o] = m.decisions.WithLabelValues(limiter, limit, string(o))
	}
	return cs
}

// Describe sends the descriptors of both metric families, as
// prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.decisions.Describe(ch)
	m.duration.Describe(ch)
}

// Collect sends the current value of every series, as
// prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.decisions.Collect(ch)
	m.duration.Collect(ch)
}
