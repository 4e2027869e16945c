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
		h.cfg.Deny(w, r, d.Result)
	case adapter.Fail:
		h.cfg.Fail(w, r, d.Err)
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
	o := c.Options
	c.flow = adapter.Flow[exchange]{
		Name: "httplimit", Limiter: lim,
		Key:          func(x exchange) (string, error) { return o.Key(x.r) },
		SetHeaders:   func(x exchange, res slidelimit.Result) { o.Headers.SetHeader(res, x.w.Header()) },
		Hook:         func(_ context.Context, x exchange, err error) { o.Hook(x.r, err) },
		RefundFailed: o.RefundFailed, RefundSuccessful: o.RefundSuccessful, Failed: o.Failed,
	}
	if o.Limiters != nil {
		c.flow.Limiters = func(x exchange) *slidelimit.Limiter { return o.Limiters(x.r) }
	}
	if o.Skip != nil {
		c.flow.Skip = func(x exchange) bool { return o.Skip(x.r) }
	}
	if o.Cost != nil {
		c.flow.Cost = func(x exchange) int { return o.Cost(x.r) }
	}
	if o.Limits != nil {
		c.flow.Limits = func(x exchange) []slidelimit.Limit { return o.Limits(x.r) }
	}
}
