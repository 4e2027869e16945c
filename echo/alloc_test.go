package echolimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
	echolimit "github.com/slidelimit/slidelimit/echo"
)

// TestMiddlewareAllocations pins what the middleware costs an admitted
// request beyond Echo's own: at most two allocations, Redis's round trip
// included (the decision's block and the identity). Echo wraps a route's
// middleware around its handler again on every request, which costs any
// middleware one allocation; the baseline is a middleware that does
// nothing.
func TestMiddlewareAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's sync.Pool drops items at random")
	}
	lim, err := slidelimit.New(redistest.Client(t), slidelimit.PerMinute(slidelimit.MaxQuota),
		slidelimit.WithPrefix(redistest.Prefix(t)), slidelimit.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	perRequest := func(mw echo.MiddlewareFunc) float64 {
		e := echo.New()
		e.GET("/", ok, mw)
		req := httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/", nil)
		req.RemoteAddr = peer
		return testing.AllocsPerRun(200, func() {
			rec := httptest.NewRecorder()
			e.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				t.Fatalf("GET / = %d, want 200", rec.Code)
			}
		})
	}
	base, limited := perRequest(noopMiddleware), perRequest(echolimit.New(lim))
	t.Logf("allocations per admitted request: %.1f behind a middleware doing nothing, %.1f behind the limiter", base, limited)
	if limited-base > 2.05 {
		t.Errorf("the middleware adds %.2f allocations to an admitted request, want at most 2", limited-base)
	}
}
