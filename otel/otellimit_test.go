package otellimit_test

import (
	"context"
	"os"
	"testing"

	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/adaptertest"
	"github.com/slidelimit/slidelimit/core/redistest"
	otellimit "github.com/slidelimit/slidelimit/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestMain gives the examples a Redis in REDIS_ADDR.
func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }

// newMetrics returns Metrics on a MeterProvider read by the returned reader.
func newMetrics(t *testing.T, opts ...otellimit.Option) (*otellimit.Metrics, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	m, err := otellimit.New(append([]otellimit.Option{otellimit.WithMeterProvider(mp)}, opts...)...)
	if err != nil {
		t.Fatalf("otellimit.New() error = %v", err)
	}
	return m, reader
}

// point is one data point of the decisions counter.
type point struct{ limiter, limit, outcome string }

// collect returns the decisions counter by attributes, and the duration
// histogram's count by limiter.
func collect(t *testing.T, reader *sdkmetric.ManualReader) (map[point]int64, map[string]uint64) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(t.Context(), &rm); err != nil {
		t.Fatalf("Collect() error = %v", err)
	}
	decisions, durations := map[point]int64{}, map[string]uint64{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != otellimit.ScopeName {
			t.Errorf("scope = %q, want %q", sm.Scope.Name, otellimit.ScopeName)
		}
		for _, m := range sm.Metrics {
			switch data := m.Data.(type) {
			case metricdata.Sum[int64]:
				if m.Name != "slidelimit.decisions" || m.Unit != "{decision}" || !data.IsMonotonic {
					t.Errorf("counter %q in %q, monotonic %v; want slidelimit.decisions in {decision}", m.Name, m.Unit, data.IsMonotonic)
				}
				for _, dp := range data.DataPoints {
					if dp.Attributes.Len() != 3 {
						t.Errorf("counter attributes = %v, want limiter, limit and outcome", dp.Attributes.ToSlice())
					}
					decisions[point{value(dp.Attributes, otellimit.KeyLimiter), value(dp.Attributes, otellimit.KeyLimit), value(dp.Attributes, otellimit.KeyOutcome)}] += dp.Value
				}
			case metricdata.Histogram[float64]:
				if m.Name != "slidelimit.decision.duration" || m.Unit != "s" {
					t.Errorf("histogram %q in %q, want slidelimit.decision.duration in s", m.Name, m.Unit)
				}
				for _, dp := range data.DataPoints {
					if dp.Attributes.Len() != 1 || dp.Sum <= 0 {
						t.Errorf("histogram point %v sum %v, want the limiter attribute only and a positive sum", dp.Attributes.ToSlice(), dp.Sum)
					}
					durations[value(dp.Attributes, otellimit.KeyLimiter)] += dp.Count
				}
			default:
				t.Errorf("unexpected metric %q of %T", m.Name, m.Data)
			}
		}
	}
	return decisions, durations
}

func value(set attribute.Set, key attribute.Key) string {
	v, _ := set.Value(key)
	return v.AsString()
}

// TestMetrics runs the sequence of promlimit's test, five admitted, one
// denied and one fallback with Redis stopped, and reads the instruments.
func TestMetrics(t *testing.T) {
	m, reader := newMetrics(t)
	adaptertest.ObserveSequence(t, m.Observer("api"))

	decisions, durations := collect(t, reader)
	want := map[point]int64{
		{"api", "5/10s", "allowed"}:          5,
		{"api", "5/10s", "denied"}:           1,
		{"api", "5/10s", "fallback_allowed"}: 1,
	}
	if !equalMaps(decisions, want) {
		t.Errorf("slidelimit.decisions = %v, want %v", decisions, want)
	}
	if durations["api"] != 7 || len(durations) != 1 {
		t.Errorf("slidelimit.decision.duration counts = %v, want 7 for api", durations)
	}
}

func equalMaps[K comparable, V comparable](a, b map[K]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestSpanEvents checks the event each decision adds to the request's span,
// in shadow mode so that the limit's denial shows too.
func TestSpanEvents(t *testing.T) {
	recorder := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	m, _ := newMetrics(t)
	lim := adaptertest.NewLimiter(t, redistest.Client(t), slidelimit.PerMinute(1), slidelimit.WithShadow(),
		slidelimit.WithObserver(m.Observer("api")))

	ctx, span := tp.Tracer("test").Start(t.Context(), "GET /ping")
	_, _ = lim.Allow(ctx, "client-192.0.2.1")
	_, _ = lim.Allow(ctx, "client-192.0.2.1")
	_, _ = lim.Allow(t.Context(), "client-192.0.2.1") // no span: no event
	span.End()

	spans := recorder.Ended()
	if len(spans) != 1 {
		t.Fatalf("recorded %d spans, want 1", len(spans))
	}
	events := spans[0].Events()
	if len(events) != 2 {
		t.Fatalf("span has %d events, want 2: %v", len(events), events)
	}
	for i, want := range []struct {
		outcome   string
		remaining int64
		retry     bool
	}{{"allowed", 0, false}, {"shadow_denied", 0, true}} {
		e := events[i]
		set := attribute.NewSet(e.Attributes...)
		if e.Name != otellimit.EventName || value(set, otellimit.KeyLimiter) != "api" || value(set, otellimit.KeyLimit) != "1/1m" || value(set, otellimit.KeyOutcome) != want.outcome {
			t.Errorf("event %d = %s %v, want %s with limiter api, limit 1/1m, outcome %s", i, e.Name, e.Attributes, otellimit.EventName, want.outcome)
		}
		if v, ok := set.Value(otellimit.KeyRemaining); !ok || v.AsInt64() != want.remaining {
			t.Errorf("event %d remaining = %v, want %d", i, v.Emit(), want.remaining)
		}
		if v, ok := set.Value(otellimit.KeyRetryAfter); ok != want.retry || want.retry && (v.AsFloat64() <= 0 || v.AsFloat64() > 60) {
			t.Errorf("event %d retry_after = %v (present %v), want present %v, in (0, 60]", i, v.Emit(), ok, want.retry)
		}
		for _, kv := range e.Attributes {
			if kv.Value.Emit() == "client-192.0.2.1" {
				t.Errorf("event %d names the identity in %s", i, kv.Key)
			}
		}
	}
}

func TestWithoutSpanEvents(t *testing.T) {
	recorder := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	m, reader := newMetrics(t, otellimit.WithoutSpanEvents())
	lim := adaptertest.NewLimiter(t, redistest.Client(t), slidelimit.PerMinute(1), slidelimit.WithObserver(m.Observer("api")))
	ctx, span := tp.Tracer("test").Start(t.Context(), "GET /ping")
	_, _ = lim.Allow(ctx, "x")
	span.End()
	if events := recorder.Ended()[0].Events(); len(events) != 0 {
		t.Errorf("span events with WithoutSpanEvents = %v, want none", events)
	}
	if decisions, _ := collect(t, reader); decisions[point{"api", "1/1m", "allowed"}] != 1 {
		t.Errorf("slidelimit.decisions = %v, want one allowed", decisions)
	}
}

// BenchmarkObserver measures what the observer adds to each decision, on
// the SDK's MeterProvider and with no span in the context.
func BenchmarkObserver(b *testing.B) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	b.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	m, err := otellimit.New(otellimit.WithMeterProvider(mp))
	if err != nil {
		b.Fatal(err)
	}
	adaptertest.BenchmarkObserver(b, m.Observer("api"))
}
