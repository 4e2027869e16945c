package promlimit_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/adaptertest"
	"github.com/slidelimit/slidelimit/core/redistest"
	promlimit "github.com/slidelimit/slidelimit/prometheus"
)

// TestMain gives the examples a Redis in REDIS_ADDR.
func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }

// decisions is the exposition of slidelimit_decisions_total for one limit
// of the limiter "api", with the given count of each outcome.
func decisions(limit string, counts map[slidelimit.Outcome]int) string {
	var b strings.Builder
	b.WriteString("# HELP slidelimit_decisions_total Rate-limit decisions, by limiter, deciding limit and outcome.\n")
	b.WriteString("# TYPE slidelimit_decisions_total counter\n")
	for _, o := range []slidelimit.Outcome{"allowed", "cached_denied", "denied", "error", "fallback_allowed", "fallback_denied", "shadow_denied"} {
		fmt.Fprintf(&b, "slidelimit_decisions_total{limit=%q,limiter=\"api\",outcome=%q} %d\n", limit, o, counts[o])
	}
	return b.String()
}

// scrape returns what reg exposes, in the text format.
func scrape(t *testing.T, reg prometheus.Gatherer) string {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather() error = %v", err)
	}
	var b strings.Builder
	for _, f := range families {
		if _, err := expfmt.MetricFamilyToText(&b, f); err != nil {
			t.Fatalf("MetricFamilyToText() error = %v", err)
		}
	}
	return b.String()
}

// checkDurations checks that the duration histogram counted n decisions.
func checkDurations(t *testing.T, reg prometheus.Gatherer, n uint64) {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather() error = %v", err)
	}
	for _, f := range families {
		if f.GetName() != "slidelimit_decision_duration_seconds" {
			continue
		}
		var count uint64
		var sum float64
		for _, m := range f.GetMetric() {
			if m.GetLabel()[0].GetValue() != "api" {
				t.Errorf("duration series labelled %v, want limiter=\"api\" only", m.GetLabel())
			}
			count += m.GetHistogram().GetSampleCount()
			sum += m.GetHistogram().GetSampleSum()
		}
		if count != n || sum <= 0 {
			t.Errorf("duration histogram: count %d, sum %v; want count %d and a positive sum", count, sum, n)
		}
		return
	}
	t.Errorf("no slidelimit_decision_duration_seconds family")
}

// TestDecisions runs a known sequence, five admitted, one denied and one
// fallback with Redis stopped, and scrapes the exact counts.
func TestDecisions(t *testing.T) {
	m := promlimit.New()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	adaptertest.ObserveSequence(t, m.Observer("api"))

	want := decisions("5/10s", map[slidelimit.Outcome]int{"allowed": 5, "denied": 1, "fallback_allowed": 1})
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "slidelimit_decisions_total"); err != nil {
		t.Error(err)
	}
	checkDurations(t, reg, 7)
	if out := scrape(t, reg); strings.Contains(out, "192.0.2.1") {
		t.Errorf("the scrape names the identity:\n%s", out)
	}
}

// TestOutcomes checks the outcomes other than TestDecisions's: shadow,
// fail-closed and error.
func TestOutcomes(t *testing.T) {
	rdb := redistest.Client(t)
	m := promlimit.New()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	shadow := adaptertest.NewLimiter(t, rdb, slidelimit.PerMinute(1), slidelimit.WithShadow(), slidelimit.WithObserver(m.Observer("api")))
	ctx := t.Context()
	for range 3 {
		if res, err := shadow.Allow(ctx, "s"); err != nil || !res.Allowed {
			t.Fatalf("Allow in shadow mode = %+v, %v, want Allowed", res, err)
		}
	}
	if _, err := shadow.Allow(ctx, ""); err == nil {
		t.Fatal(`Allow("") error = nil, want ErrInvalidKey`)
	}

	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1}) // a closed port
	t.Cleanup(func() { _ = down.Close() })
	closed := adaptertest.NewLimiter(t, down, slidelimit.PerMinute(1), slidelimit.WithFailurePolicy(slidelimit.FailClosed),
		slidelimit.WithObserver(m.Observer("api")))
	if res, err := closed.Allow(ctx, "c"); err == nil || res.Allowed {
		t.Fatalf("fail-closed Allow with no Redis = %+v, %v, want a denial and an error", res, err)
	}

	want := decisions("1/1m", map[slidelimit.Outcome]int{"allowed": 1, "shadow_denied": 2, "fallback_denied": 1, "error": 1})
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "slidelimit_decisions_total"); err != nil {
		t.Error(err)
	}
	checkDurations(t, reg, 5)
}

// TestSeveralLimiters gives two limiters observers of one Metrics, and
// checks that both register once and keep apart.
func TestSeveralLimiters(t *testing.T) {
	rdb := redistest.Client(t)
	m := promlimit.New(promlimit.WithConstLabels(prometheus.Labels{"region": "eu"}), promlimit.WithBuckets(0.001, 0.01))
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	api := adaptertest.NewLimiter(t, rdb, slidelimit.PerMinute(10), slidelimit.WithObserver(m.Observer("api")))
	login := adaptertest.NewLimiter(t, rdb, slidelimit.PerMinute(3).Named("login"), slidelimit.WithObserver(m.Observer("login")))
	ctx := t.Context()
	_, _ = api.Allow(ctx, "a")
	_, _ = login.Allow(ctx, "a")
	_, _ = login.Allow(ctx, "a")

	out := scrape(t, reg)
	for _, want := range []string{
		`slidelimit_decisions_total{limit="10/1m",limiter="api",outcome="allowed",region="eu"} 1`,
		`slidelimit_decisions_total{limit="login",limiter="login",outcome="allowed",region="eu"} 2`,
		`slidelimit_decision_duration_seconds_bucket{limiter="api",region="eu",le="0.01"} 1`,
		`slidelimit_decision_duration_seconds_count{limiter="login",region="eu"} 2`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("scrape lacks %s:\n%s", want, out)
		}
	}
}

// BenchmarkObserver measures what the observer adds to each decision.
func BenchmarkObserver(b *testing.B) {
	adaptertest.BenchmarkObserver(b, promlimit.New().Observer("api"))
}
