package ginlimit

import (
	"github.com/gin-gonic/gin"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/adapter"
	"github.com/slidelimit/slidelimit/core/httplimit"
)

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
// (WithDenyHandler). The flow is package adapter's, the one every adapter
// of this project runs.
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
	o := adapter.NewOptions(adapter.Options[*gin.Context, DenyHandler, ErrorHandler]{
		Key: KeyByIP, Deny: DefaultDenyHandler, Fail: DefaultErrorHandler, Hook: logError, Failed: httplimit.Failed,
	}, opts)
	f := o.Flow("ginlimit", lim)
	f.SetHeaders = func(c *gin.Context, res slidelimit.Result) { o.Headers.SetHeader(res, c.Writer.Header()) }
	return func(c *gin.Context) {
		ctx := c.Request.Context()
		d := f.Decide(ctx, c)
		switch d.Verdict {
		case adapter.Deny:
			o.Deny(c, d.Result)
			c.Abort()
		case adapter.Fail:
			o.Fail(c, d.Err)
			c.Abort()
		default:
			c.Next()
			f.Finish(ctx, c, d, c.Writer.Status())
		}
	}
}
