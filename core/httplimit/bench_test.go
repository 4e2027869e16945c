package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/adaptertest"
	"github.com/slidelimit/slidelimit/core/httplimit"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// serveOK serves GET / from 192.0.2.1 through h, n times, or b.N times
// for a benchmark, and fails unless each is answered 200.
func serveOK(tb testing.TB, h http.Handler, n int) {
	req := httptest.NewRequestWithContext(tb.Context(), http.MethodGet, "/", nil)
	req.RemoteAddr = "192.0.2.1:41000"
	for range n {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			tb.Fatalf("GET / = %d, want 200", rec.Code)
		}
	}
}

// BenchmarkMiddleware serves GET / bare and behind the middleware (every
// request admitted, against the test Redis): with -benchmem, the difference
// in allocs/op is what the limiter adds, go-redis included.
func BenchmarkMiddleware(b *testing.B) {
	lim := adaptertest.NewLimiter(b, redistest.Client(b), slidelimit.PerMinute(slidelimit.MaxQuota))
	for _, tc := range []struct {
		name string
		h    http.Handler
	}{{"bare", ok}, {"limited", httplimit.New(lim)(ok)}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			serveOK(b, tc.h, b.N)
		})
	}
}

// TestMiddlewareAllocations pins what the middleware costs an admitted
// request beyond net/http's own: at most two allocations, Redis's round
// trip included (the decision's block and the identity).
func TestMiddlewareAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's sync.Pool drops items at random")
	}
	lim := adaptertest.NewLimiter(t, redistest.Client(t), slidelimit.PerMinute(slidelimit.MaxQuota))
	perRequest := func(h http.Handler) float64 { return testing.AllocsPerRun(200, func() { serveOK(t, h, 1) }) }
	bare, limited := perRequest(ok), perRequest(httplimit.New(lim)(ok))
	t.Logf("allocations per admitted request: %.1f bare, %.1f behind the limiter", bare, limited)
	if limited-bare > 2.05 {
		t.Errorf("the middleware adds %.2f allocations to an admitted request, want at most 2", limited-bare)
	}
}
