package otellimit

import (
	"context"
	"fmt"
	"sync"

	slidelimit "github.com/slidelimit/slidelimit/core"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the meter Metrics creates its
// instruments with.
const ScopeName = "github.com/slidelimit/slidelimit/otel"

// Attribute keys of the instruments and the span event.
const (
	// KeyLimiter is the name given to Observer.
	KeyLimiter = attribute.Key("slidelimit.limiter")
	// KeyLimit is the deciding limit, as slidelimit.Limit.String.
	KeyLimit = attribute.Key("slidelimit.limit")
	// KeyOutcome is the decision's slidelimit.Outcome.
	KeyOutcome = attribute.Key("slidelimit.outcome")
	// KeyCost is the number of units asked for; span events only.
	KeyCost = attribute.Key("slidelimit.cost")
	// KeyRemaining is how many units the deciding limit has left; span
	// events only.
	KeyRemaining = attribute.Key("slidelimit.remaining")
	// KeyRetryAfter is how long, in seconds, until the request would be
	// admitted; span events only, and only on a denial, a shadow denial
	// included.
	KeyRetryAfter = attribute.Key("slidelimit.retry_after")
)

// EventName names the span event of a decision.
const EventName = "slidelimit.decision"

// DefaultBuckets are the bucket boundaries, in seconds, of the decision
// duration histogram unless WithBuckets sets others: 100 µs to 250 ms,
// around the limiter's default timeout of 100 ms.
var DefaultBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25}

// Metrics records the decisions of any number of limiters. It is safe for
// concurrent use.
type Metrics struct {
	decisions metric.Int64Counter
	duration  metric.Float64Histogram
	events    bool
}

// Option configures Metrics in New.
type Option func(*config)

type config struct {
	provider metric.MeterProvider
	buckets  []float64
	events   bool
}

// WithMeterProvider sets the MeterProvider the instruments come from. The
// default is the global one, otel.GetMeterProvider().
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.provider = mp }
}

// WithBuckets sets the bucket boundaries, in seconds, of the decision
// duration histogram. The default is DefaultBuckets.
func WithBuckets(buckets ...float64) Option {
	return func(c *config) { c.buckets = buckets }
}

// WithoutSpanEvents stops the observer from adding an event to the span of
// each decision. By default it adds one whenever the span is recording.
func WithoutSpanEvents() Option {
	return func(c *config) { c.events = false }
}

// New returns Metrics whose instruments come from the MeterProvider of
// WithMeterProvider, by default the global one. The error is the meter's,
// creating an instrument.
func New(opts ...Option) (*Metrics, error) {
	cfg := config{buckets: DefaultBuckets, events: true}
	for _, opt := range opts {
		opt(&cfg)
	}
	if cfg.provider == nil {
		cfg.provider = otel.GetMeterProvider()
	}
	meter := cfg.provider.Meter(ScopeName)
	decisions, err := meter.Int64Counter("slidelimit.decisions",
		metric.WithUnit("{decision}"),
		metric.WithDescription("Rate-limit decisions, by limiter, deciding limit and outcome."))
	if err != nil {
		return nil, fmt.Errorf("otellimit: %w", err)
	}
	duration, err := meter.Float64Histogram("slidelimit.decision.duration",
		metric.WithUnit("s"),
		metric.WithDescription("Time taken by rate-limit decisions, Redis round trip included."),
		metric.WithExplicitBucketBoundaries(cfg.buckets...))
	if err != nil {
		return nil, fmt.Errorf("otellimit: %w", err)
	}
	return &Metrics{decisions: decisions, duration: duration, events: cfg.events}, nil
}

// series identifies the attributes of one counter series.
type series struct {
	limit   slidelimit.Limit
	outcome slidelimit.Outcome
}

// Observer returns the slidelimit.Observer that records the decisions of
// the limiter named limiter, for slidelimit.WithObserver. The name is an
// attribute value: keep it short and fixed, such as "api" or "login".
func (m *Metrics) Observer(limiter string) slidelimit.Observer {
	name := KeyLimiter.String(limiter)
	// Options built once, so that a measurement allocates nothing for them.
	byLimiter := []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(name))}
	var bySeries sync.Map // series → []metric.AddOption
	count := func(ctx context.Context, s series) {
		attrs, ok := bySeries.Load(s)
		if !ok {
			set := attribute.NewSet(name, KeyLimit.String(s.limit.String()), KeyOutcome.String(string(s.outcome)))
			attrs, _ = bySeries.LoadOrStore(s, []metric.AddOption{metric.WithAttributeSet(set)})
		}
		m.decisions.Add(ctx, 1, attrs.([]metric.AddOption)...)
	}
	return func(ctx context.Context, o slidelimit.Observation) {
		s := series{o.Result.Limit, o.Outcome()}
		count(ctx, s)
		// A shadow limit being rolled out counts its would-be denials.
		for _, limit := range o.ShadowDenied() {
			count(ctx, series{limit, slidelimit.OutcomeShadowDenied})
		}
		m.duration.Record(ctx, o.Latency.Seconds(), byLimiter...)
		if !m.events {
			return
		}
		if span := trace.SpanFromContext(ctx); span.IsRecording() {
			span.AddEvent(EventName, trace.WithAttributes(eventAttributes(name, s, o)...))
		}
	}
}

// eventAttributes returns the attributes of the span event of o.
func eventAttributes(name attribute.KeyValue, s series, o slidelimit.Observation) []attribute.KeyValue {
	kv := []attribute.KeyValue{
		name,
		KeyLimit.String(s.limit.String()),
		KeyOutcome.String(string(s.outcome)),
		KeyCost.Int(o.Cost),
	}
	if o.Result.Fallback || o.Err != nil {
		return kv // no quota was checked
	}
	kv = append(kv, KeyRemaining.Int(o.Result.Remaining))
	if o.Result.RetryAfter > 0 {
		kv = append(kv, KeyRetryAfter.Float64(o.Result.RetryAfter.Seconds()))
	}
	return kv
}
