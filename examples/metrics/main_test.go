package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
	promlimit "github.com/slidelimit/slidelimit/prometheus"
)

// serve returns the server's handler on a limiter of the test's own, in
// shadow mode if shadow.
func serve(t *testing.T, shadow bool) http.Handler {
	t.Helper()
	metrics := promlimit.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics)
	lim, err := newLimiter(redistest.Client(t), metrics, shadow, slidelimit.WithPrefix(redistest.Prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	return newHandler(lim, reg, slidelimit.ClientIP{})
}

func get(h http.Handler, path string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, path, nil)
	r.RemoteAddr = "203.0.113.9:40000"
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

// checkMetrics fails the test unless GET /metrics has every line of want.
func checkMetrics(t *testing.T, h http.Handler, want ...string) {
	t.Helper()
	rec := get(h, "/metrics")
	body, _ := io.ReadAll(rec.Body)
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics = %d, want 200", rec.Code)
	}
	for _, line := range want {
		if !strings.Contains(string(body), "\n"+line+"\n") {
			t.Errorf("GET /metrics lacks %q:\n%s", line, body)
		}
	}
	if strings.Contains(string(body), "203.0.113.9") {
		t.Errorf("GET /metrics names the client:\n%s", body)
	}
}

func TestPing(t *testing.T) {
	h := serve(t, false)
	want := []int{200, 200, 200, 200, 200, 429}
	for i, w := range want {
		rec := get(h, "/ping")
		if rec.Code != w {
			t.Errorf("GET /ping #%d = %d, want %d", i+1, rec.Code, w)
		}
		if rec.Header().Get("RateLimit") == "" {
			t.Errorf("GET /ping #%d has no RateLimit header", i+1)
		}
	}
	checkMetrics(t, h,
		`slidelimit_decisions_total{limit="5/10s",limiter="ping",outcome="allowed"} 5`,
		`slidelimit_decisions_total{limit="5/10s",limiter="ping",outcome="denied"} 1`,
		`slidelimit_decisions_total{limit="5/10s",limiter="ping",outcome="shadow_denied"} 0`,
		`slidelimit_decision_duration_seconds_count{limiter="ping"} 6`,
	)
	if rec := get(h, "/healthz"); rec.Code != http.StatusOK {
		t.Errorf("GET /healthz = %d, want 200", rec.Code)
	}
}

func TestPingShadow(t *testing.T) {
	h := serve(t, true)
	for i := range 6 {
		rec := get(h, "/ping")
		if rec.Code != http.StatusOK {
			t.Errorf("GET /ping #%d in shadow mode = %d, want 200", i+1, rec.Code)
		}
		if got, want := rec.Header().Get("RateLimit") != "", i < 5; got != want {
			t.Errorf("GET /ping #%d in shadow mode has a RateLimit header: %v, want %v", i+1, got, want)
		}
	}
	checkMetrics(t, h,
		`slidelimit_decisions_total{limit="5/10s",limiter="ping",outcome="allowed"} 5`,
		`slidelimit_decisions_total{limit="5/10s",limiter="ping",outcome="denied"} 0`,
		`slidelimit_decisions_total{limit="5/10s",limiter="ping",outcome="shadow_denied"} 1`,
	)
}

func TestRunStopsOnSignal(t *testing.T) {
	for _, shadow := range []string{"", "1"} {
		rdb := redistest.Client(t)
		t.Setenv("REDIS_CLUSTER_ADDRS", "")
		t.Setenv("REDIS_URL", "redis://"+rdb.Options().Addr+"/0")
		t.Setenv("ADDR", "127.0.0.1:0")
		t.Setenv("SHADOW", shadow)
		ctx, cancel := context.WithCancel(t.Context())
		cancel() // as SIGTERM would
		if err := run(ctx); err != nil {
			t.Errorf("run with SHADOW=%q after the signal = %v, want nil", shadow, err)
		}
	}
}
