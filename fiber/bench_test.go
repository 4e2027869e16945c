package fiberlimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
	fiberlimit "github.com/slidelimit/slidelimit/fiber"
)

// BenchmarkMiddleware serves GET / bare and behind the middleware (every
// request admitted, against the test Redis) through app.Test: with
// -benchmem, the difference in allocs/op is what the limiter adds, go-redis
// included (app.Test's own connection is in both).
func BenchmarkMiddleware(b *testing.B) {
	lim, err := slidelimit.New(redistest.Client(b), slidelimit.PerMinute(slidelimit.MaxQuota),
		slidelimit.WithPrefix(redistest.Prefix(b)), slidelimit.WithTimeout(10*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		mw   []fiber.Handler
	}{{"bare", nil}, {"limited", []fiber.Handler{fiberlimit.New(lim)}}} {
		b.Run(tc.name, func(b *testing.B) {
			app := newApp()
			app.Get("/", append(tc.mw, ok)...)
			b.ReportAllocs()
			for range b.N {
				req := httptest.NewRequest(http.MethodGet, "/", nil)
				resp, err := app.Test(req, -1)
				if err != nil || resp.StatusCode != http.StatusOK {
					b.Fatalf("GET / = %v, %v, want 200", resp, err)
				}
				_ = resp.Body.Close()
			}
		})
	}
}
