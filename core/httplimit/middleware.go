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
// the peer IP), or at every level of its tenant's tree (WithTree), and
// sets the rate-limit headers of the decision (WithHeaders). An admitted
// request goes on to the next handler; a denied one is answered 429 Too
// Many Requests with Retry-After and a problem+json body
// (WithDenyHandler). The flow is package adapter's, the one every
// adapter of this project runs.
//
// A request admitted under an in-flight limit (slidelimit.InFlight) holds
// its place until the next handler returns, or panics; then its place is
// released. While it runs its lease is renewed, so that a request, or a
// stream, longer than the lease keeps its place. With WithSettle, the
// request is settled from its response to its actual cost, in the same
// round trip.
// A streamed response (Server-Sent Events) ends when the handler returns,
// after its last flush.
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
	m := newMiddleware(lim, newConfig(opts))
	return func(next http.Handler) http.Handler {
		return &handler{m: m, next: next}
	}
}

// middleware is what every handler New wraps shares: the settings and
// their decision flow.
type middleware struct {
	config
	flow adapter.Flow[exchange]
}

// exchange is one request and its response writer, the context the flow
// runs over.
type exchange struct {
	w http.ResponseWriter
	r *http.Request
}

type handler struct {
	m    *middleware
	next http.Handler
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	x := exchange{w, r}
	f := &h.m.flow
	d := f.Decide(r.Context(), x)
	switch d.Verdict {
	case adapter.Deny:
		h.m.Deny(w, r, d.Result)
		return
	case adapter.Fail:
		h.m.Fail(w, r, d.Err)
		return
	}
	p := f.Pend(r.Context(), x, d)
	if p == nil {
		h.next.ServeHTTP(w, r)
		return
	}
	defer p.Abort() // a handler that panics releases its places in flight
	rw := &adapter.ResponseWriter{ResponseWriter: w}
	if p.Captures() {
		rw.Body = p
	}
	h.next.ServeHTTP(rw, r)
	p.End(rw.Status(), w.Header())
}

// newMiddleware returns the middleware of o's settings, with lim.
func newMiddleware(lim *slidelimit.Limiter, o config) *middleware {
	c := &middleware{config: o}
	c.flow = adapter.Flow[exchange]{
		Name: "httplimit", Limiter: lim,
		Key:          func(x exchange) (string, error) { return o.Key(x.r) },
		SetHeaders:   func(x exchange, res slidelimit.Result) { o.Headers.SetHeader(res, x.w.Header()) },
		Hook:         func(_ context.Context, x exchange, err error) { o.Hook(x.r, err) },
		RefundFailed: o.RefundFailed, RefundSuccessful: o.RefundSuccessful, Failed: o.Failed,
	}
	if o.Settle != nil {
		c.flow.Settle = func(x exchange, r adapter.Response) (int, bool) { return o.Settle(x.r, r) }
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
	if o.Tree != nil {
		c.flow.Tree = func(x exchange) (string, []slidelimit.Level, error) { return o.Tree(x.r) }
	}
	return c
}
