package httplimit

import (
	"context"
	"net/http"

	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/adapter"
)

// New returns middleware that limits requests with lim, in the shape
// http.ServeMux, chi (Router.Use) and gorilla/mux (Router.Use) take:
//
//	mux.Handle("GET /search", httplimit.New(lim)(searchHandler))
//	handler := httplimit.New(lim, httplimit.WithKey(ips.Key))(mux)
//
// For each request it asks lim, or the limiter WithLimiterFunc chooses, to
// admit one unit (WithCost) for the request's identity (WithKey; by default
// the peer IP), and sets the rate-limit headers of the decision
// (WithHeaders). An admitted request goes on to the next handler; a denied
// one is answered 429 Too Many Requests with Retry-After and a problem+json
// body (WithDenyHandler). The flow is package adapter's, the one every
// adapter of this project runs.
//
// When Redis fails, the limiter's slidelimit.FailurePolicy decides. Under
// FailOpen, the default, the request goes on with no rate-limit headers,
// since none could be checked; under FailClosed it is answered 503 with
// Retry-After (WithErrorHandler). Either way the error goes to the error
// hook (WithErrorHook). A dead Redis delays a request by at most the
// limiter's timeout (slidelimit.WithTimeout).
//
// A nil lim is allowed only with WithLimiterFunc; a request for which there
// is no limiter is answered by the error handler. The middleware is safe for
// concurrent use.
func New(lim *slidelimit.Limiter, opts ...Option) func(http.Handler) http.Handler {
	cfg := newConfig(lim, opts)
	return func(next http.Handler) http.Handler {
		return &handler{cfg: cfg, next: next}
	}
}

// exchange is one request and its response writer, the context the flow
// runs over.
type exchange struct {
	w http.ResponseWriter
	r *http.Request
}

type handler struct {
	cfg  *config
	next http.Handler
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	x := exchange{w, r}
	f := &h.cfg.flow
	d := f.Decide(r.Context(), x)
	switch d.Verdict {
	case adapter.Deny:
		h.cfg.deny(w, r, d.Result)
	case adapter.Fail:
		h.cfg.fail(w, r, d.Err)
	default:
		if !f.Refunds(d) {
			h.next.ServeHTTP(w, r)
			return
		}
		sw := &statusWriter{ResponseWriter: w}
		h.next.ServeHTTP(sw, r)
		f.Finish(r.Context(), x, d, sw.Status())
	}
}

// newFlow sets up c.flow, the decision flow of c's settings, with lim.
func (c *config) newFlow(lim *slidelimit.Limiter) {
	f := &c.flow
	f.Name, f.Limiter, f.Failed = "httplimit", lim, c.failed
	f.Key = func(x exchange) (string, error) { return c.key(x.r) }
	f.SetHeaders = func(x exchange, res slidelimit.Result) { c.headers.SetHeader(res, x.w.Header()) }
	f.Hook = func(_ context.Context, x exchange, err error) { c.hook(x.r, err) }
	if c.limiterFunc != nil {
		f.Limiters = func(x exchange) *slidelimit.Limiter { return c.limiterFunc(x.r) }
	}
	if c.skip != nil {
		f.Skip = func(x exchange) bool { return c.skip(x.r) }
	}
	if c.cost != nil {
		f.Cost = func(x exchange) int { return c.cost(x.r) }
	}
}
