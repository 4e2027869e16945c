package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	slidelimit "github.com/slidelimit/slidelimit/core"
)

// errNoLimiter is the error when neither New nor WithLimiterFunc gives a
// limiter for a request.
var errNoLimiter = errors.New("httplimit: no limiter for the request")

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
// body (WithDenyHandler).
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

type handler struct {
	cfg  *config
	next http.Handler
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c := h.cfg
	if c.skip != nil && c.skip(r) {
		h.next.ServeHTTP(w, r)
		return
	}
	lim := c.limiter
	if c.limiterFunc != nil {
		if l := c.limiterFunc(r); l != nil {
			lim = l
		}
	}
	if lim == nil {
		c.hook(r, errNoLimiter)
		c.fail(w, r, errNoLimiter)
		return
	}
	id, err := c.key(r)
	if err != nil {
		err = fmt.Errorf("httplimit: key: %w", err)
		c.hook(r, err)
		c.fail(w, r, err)
		return
	}
	cost := 1
	if c.cost != nil {
		cost = c.cost(r)
	}

	res, err := lim.AllowN(r.Context(), id, cost)
	c.headers.SetHeader(res, w.Header())
	if err != nil {
		c.hook(r, err)
		if !res.Allowed {
			c.fail(w, r, err)
			return
		}
	} else if !res.Allowed {
		c.deny(w, r, res)
		return
	}

	if !c.refundFail && !c.refundOK || res.Fallback {
		h.next.ServeHTTP(w, r)
		return
	}
	sw := &statusWriter{ResponseWriter: w}
	h.next.ServeHTTP(sw, r)
	if failed := c.failed(sw.Status()); failed && c.refundFail || !failed && c.refundOK {
		// The client may be gone; the refund is still owed, bounded by the
		// limiter's timeout.
		if err := lim.Refund(context.WithoutCancel(r.Context()), res); err != nil {
			c.hook(r, fmt.Errorf("httplimit: refund: %w", err))
		}
	}
}
