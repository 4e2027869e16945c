package ginlimit

import (
	"context"
	"errors"
	"fmt"

	"github.com/gin-gonic/gin"
	slidelimit "github.com/slidelimit/slidelimit/core"
)

// errNoLimiter is the error when neither New nor WithLimiterFunc gives a
// limiter for a request.
var errNoLimiter = errors.New("ginlimit: no limiter for the request")

// New returns Gin middleware that limits requests with lim:
//
//	r.GET("/ping", ginlimit.New(lim), ping)    // one route
//	api := r.Group("/api", ginlimit.New(lim)) // a group
//
// For each request it asks lim, or the limiter WithLimiterFunc chooses, to
// admit one unit (WithCost) for the request's identity (WithKey; by default
// the peer IP), and sets the rate-limit headers of the decision
// (WithHeaders). An admitted request goes on down the chain; a denied one
// is aborted with 429 Too Many Requests, Retry-After and a problem+json body
// (WithDenyHandler).
//
// When Redis fails, the limiter's slidelimit.FailurePolicy decides. Under
// FailOpen, the default, the request goes on with no rate-limit headers,
// since none could be checked; under FailClosed it is aborted with 503 and
// Retry-After (WithErrorHandler). Either way the error goes to the error
// hook (WithErrorHook). A dead Redis delays a request by at most the
// limiter's timeout (slidelimit.WithTimeout).
//
// A nil lim is allowed only with WithLimiterFunc; a request for which there
// is no limiter is answered by the error handler. The middleware is safe for
// concurrent use.
func New(lim *slidelimit.Limiter, opts ...Option) gin.HandlerFunc {
	cfg := newConfig(lim, opts)
	return func(c *gin.Context) {
		if cfg.skip != nil && cfg.skip(c) {
			c.Next()
			return
		}
		l := cfg.limiter
		if cfg.limiterFunc != nil {
			if chosen := cfg.limiterFunc(c); chosen != nil {
				l = chosen
			}
		}
		if l == nil {
			cfg.reject(c, errNoLimiter)
			return
		}
		id, err := cfg.key(c)
		if err != nil {
			cfg.reject(c, fmt.Errorf("ginlimit: key: %w", err))
			return
		}
		cost := 1
		if cfg.cost != nil {
			cost = cfg.cost(c)
		}

		ctx := c.Request.Context()
		res, err := l.AllowN(ctx, id, cost)
		cfg.headers.SetHeader(res, c.Writer.Header())
		if err != nil {
			if !res.Allowed {
				cfg.reject(c, err)
				return
			}
			cfg.hook(c, err)
		} else if !res.Allowed {
			cfg.deny(c, res)
			c.Abort()
			return
		}

		c.Next()
		if !cfg.refundFail && !cfg.refundOK || res.Fallback {
			return
		}
		if failed := cfg.failed(c.Writer.Status()); failed && cfg.refundFail || !failed && cfg.refundOK {
			// The client may be gone; the refund is still owed, bounded by
			// the limiter's timeout.
			if err := l.Refund(context.WithoutCancel(ctx), res); err != nil {
				cfg.hook(c, fmt.Errorf("ginlimit: refund: %w", err))
			}
		}
	}
}

// reject reports err and answers with the error handler.
func (cfg *config) reject(c *gin.Context, err error) {
	cfg.hook(c, err)
	cfg.fail(c, err)
	c.Abort()
}
