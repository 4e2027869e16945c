package httplimit

import (
	"net/http"
	"slices"
)

// TransportOption configures a Transport.
type TransportOption func(*transportConfig)

type transportConfig struct {
	base      http.RoundTripper
	key       func(*http.Request) (string, error)
	cost      func(*http.Request) int
	throttled []int
	hook      func(*http.Request, error)
}

// WithBase sets the RoundTripper a Transport sends admitted requests on.
// The default is http.DefaultTransport. Wrap an otelhttp or retrying
// transport here, or wrap the Transport in one: each attempt of a retrying
// transport outside waits for the limit again.
func WithBase(rt http.RoundTripper) TransportOption {
	return func(c *transportConfig) {
		if rt != nil {
			c.base = rt
		}
	}
}

// WithRequestKey sets the function that names the limit an outgoing
// request counts against: its identity for Limiter.WaitN and Block. The
// default is KeyByHost. Requests whose key function fails are not sent.
func WithRequestKey(f func(*http.Request) (string, error)) TransportOption {
	return func(c *transportConfig) {
		if f != nil {
			c.key = f
		}
	}
}

// WithRequestCost sets the cost of an outgoing request; a result below 1
// counts as 1. The default costs every request 1.
func WithRequestCost(f func(*http.Request) int) TransportOption {
	return func(c *transportConfig) { c.cost = f }
}

// WithThrottleStatuses sets the response statuses by which the other side
// says it is throttling: with a Retry-After, they block the request's key
// for every process sharing the limiter. The default is 429 Too Many
// Requests and 503 Service Unavailable; none turns blocking off.
func WithThrottleStatuses(codes ...int) TransportOption {
	return func(c *transportConfig) { c.throttled = slices.Clone(codes) }
}

// WithTransportErrorHook sets a function called with every error of the
// limiter that did not stop the request: a Redis failure whose
// FailurePolicy admitted it anyway, or a block that could not be recorded.
// The default ignores them; a limiter's WithObserver sees the first kind
// too.
func WithTransportErrorHook(f func(r *http.Request, err error)) TransportOption {
	return func(c *transportConfig) { c.hook = f }
}
