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

// BenchmarkMiddleware serves GET / bare, behind a middleware that does
// nothing, and behind the limiter (every request admitted, against the test
// Redis): with -benchmem, the difference in allocs/op between "limited" and
// "noop" is what the limiter adds, Redis's round trip included. Echo wraps
// a route's middleware around its handler on every request, which costs
// any middleware one allocation.
func BenchmarkMiddleware(b *testing.B) {
	lim, err := slidelimit.New(redistest.Client(b), slidelimit.PerMinute(slidelimit.MaxQuota),
		slidelimit.WithPrefix(redistest.Prefix(b)), slidelimit.WithTimeout(10*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		mw   []echo.MiddlewareFunc
	}{{"bare", nil}, {"noop", []echo.MiddlewareFunc{noopMiddleware}}, {"limited", []echo.MiddlewareFunc{echolimit.New(lim)}}} {
		b.Run(tc.name, func(b *testing.B) {
			e := echo.New()
			e.GET("/", ok, tc.mw...)
			req := httptest.NewRequestWithContext(b.Context(), http.MethodGet, "/", nil)
			req.RemoteAddr = peer
			b.ReportAllocs()
			for range b.N {
				rec := httptest.NewRecorder()
				e.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					b.Fatalf("GET / = %d, want 200", rec.Code)
				}
			}
		})
	}
}

// noopMiddleware does nothing: Echo's own cost of a route middleware.
func noopMiddleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error { return next(c) }
}
