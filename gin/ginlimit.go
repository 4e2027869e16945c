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
// A request admitted under an in-flight limit (slidelimit.InFlight) holds
// its place while the rest of the chain runs, renewed for as long as it
// runs, and releases it when the chain returns or panics. With
// WithSettle, the request is settled from its response to its actual
// cost, in the same round trip; a streamed response (c.Stream, c.SSEvent)
// is settled when the chain returns, after its last event.
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
	o := adapter.NewOptions(config{
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
			serve(c, f.Pend(ctx, c, d))
		}
	}
}

// serve runs the rest of the chain for the admitted request c, and ends
// it through p.
func serve(c *gin.Context, p *adapter.Pending[*gin.Context]) {
	if p == nil {
		c.Next() // nothing owed at the end
		return
	}
	defer p.Abort() // a panic releases the places in flight
	if p.Captures() {
		w := &bodyWriter{ResponseWriter: c.Writer, body: p}
		c.Writer = w
		defer func() { c.Writer = w.ResponseWriter }()
	}
	c.Next()
	p.End(c.Writer.Status(), c.Writer.Header())
}

// bodyWriter passes the body on to the writer it wraps and writes it to
// body too, for the settle function.
type bodyWriter struct {
	gin.ResponseWriter
	body *adapter.Pending[*gin.Context]
}

// Write writes b to the response and to the body kept.
func (w *bodyWriter) Write(b []byte) (int, error) {
	n, err := w.ResponseWriter.Write(b)
	_, _ = w.body.Write(b[:n])
	return n, err
}

// WriteString writes s to the response and to the body kept.
func (w *bodyWriter) WriteString(s string) (int, error) {
	n, err := w.ResponseWriter.WriteString(s)
	_, _ = w.body.Write([]byte(s[:n]))
	return n, err
}
