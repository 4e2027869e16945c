package fiberlimit_test

import (
	"net"
	"net/http"
	"testing"

	"github.com/gofiber/fiber/v2"
	fiberlimit "github.com/slidelimit/slidelimit/fiber"
	"github.com/valyala/fasthttp"
)

// TestMiddlewareAllocations pins what the middleware costs an admitted
// request beyond Fiber's own, served as Fiber's server serves it: at most
// two allocations, Redis's round trip included (the decision's block and
// the identity).
func TestMiddlewareAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's sync.Pool drops items at random")
	}
	lim := benchLimiter(t)
	peer := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 41000}
	perRequest := func(mw ...fiber.Handler) float64 {
		app := newApp()
		app.Get("/", append(mw, ok)...)
		serve := app.Handler()
		var req fasthttp.Request
		req.Header.SetMethod(http.MethodGet)
		req.SetRequestURI("/")
		var ctx fasthttp.RequestCtx
		ctx.Init(&req, peer, nil)
		return testing.AllocsPerRun(200, func() {
			ctx.Response.Reset()
			serve(&ctx)
			if code := ctx.Response.StatusCode(); code != http.StatusOK {
				t.Fatalf("GET / = %d, want 200", code)
			}
		})
	}
	bare, limited := perRequest(), perRequest(fiberlimit.New(lim))
	t.Logf("allocations per admitted request: %.1f bare, %.1f behind the limiter", bare, limited)
	if limited-bare > 2.05 {
		t.Errorf("the middleware adds %.2f allocations to an admitted request, want at most 2", limited-bare)
	}
}
