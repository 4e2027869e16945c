package fiberlimit_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
	fiberlimit "github.com/slidelimit/slidelimit/fiber"
	"github.com/valyala/fasthttp"
)

// BenchmarkMiddleware serves GET / bare and behind the middleware (every
// request admitted, against the test Redis) through the app's
// fasthttp handler, as Fiber's server calls it: with -benchmem, the
// difference in allocs/op is what the limiter adds, go-redis included.
// app.Test would add its client's parsing of the response, whose cost
// grows with every header line the limiter sets; BenchmarkAppTest keeps
// that figure.
func BenchmarkMiddleware(b *testing.B) {
	lim := benchLimiter(b)
	peer := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 41000}
	for _, tc := range []struct {
		name string
		mw   []fiber.Handler
	}{{"bare", nil}, {"limited", []fiber.Handler{fiberlimit.New(lim)}}} {
		b.Run(tc.name, func(b *testing.B) {
			app := newApp()
			app.Get("/", append(tc.mw, ok)...)
			serve := app.Handler()
			var req fasthttp.Request
			req.Header.SetMethod(http.MethodGet)
			req.SetRequestURI("/")
			var ctx fasthttp.RequestCtx
			ctx.Init(&req, peer, nil)
			b.ReportAllocs()
			for range b.N {
				ctx.Response.Reset()
				serve(&ctx)
				if code := ctx.Response.StatusCode(); code != http.StatusOK {
					b.Fatalf("GET / = %d, want 200", code)
				}
			}
		})
	}
}

// BenchmarkAppTest is BenchmarkMiddleware through app.Test, which also
// writes the request and parses the response with net/http.
func BenchmarkAppTest(b *testing.B) {
	lim := benchLimiter(b)
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

// benchLimiter returns a limiter whose quota no benchmark run reaches.
func benchLimiter(b testing.TB) *slidelimit.Limiter {
	b.Helper()
	lim, err := slidelimit.New(redistest.Client(b), slidelimit.PerMinute(slidelimit.MaxQuota),
		slidelimit.WithPrefix(redistest.Prefix(b)), slidelimit.WithTimeout(10*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	return lim
}
