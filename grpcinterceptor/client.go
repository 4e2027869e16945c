package grpclimit

import (
	"context"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// Defaults of UnaryClientInterceptor.
const (
	// DefaultRetries is how many times a call is retried, unless
	// WithRetries says otherwise.
	DefaultRetries = 2
	// DefaultMaxRetryDelay is the longest RetryInfo delay waited for,
	// unless WithMaxRetryDelay says otherwise.
	DefaultMaxRetryDelay = 30 * time.Second
)

// ClientOption configures UnaryClientInterceptor.
type ClientOption func(*clientConfig)

type clientConfig struct {
	retries  int
	maxDelay time.Duration
}

// WithRetries sets how many times a call is retried after the first
// attempt; 0 turns retries off. The default is DefaultRetries.
func WithRetries(n int) ClientOption {
	return func(c *clientConfig) { c.retries = max(n, 0) }
}

// WithMaxRetryDelay sets the longest delay a call waits before a retry; a
// failure asking for longer is returned at once. The default is
// DefaultMaxRetryDelay.
func WithMaxRetryDelay(d time.Duration) ClientOption {
	return func(c *clientConfig) { c.maxDelay = max(d, 0) }
}

// UnaryClientInterceptor returns a client interceptor that retries a call
// failing with a status that carries a google.rpc.RetryInfo, as this
// package's server interceptors send with codes.ResourceExhausted and
// codes.Unavailable: it waits the retry delay and calls again, up to
// WithRetries times. It returns the failure at once when the delay is
// longer than WithMaxRetryDelay or would outlast the call's deadline, and
// returns the context's status when the context ends while it waits.
// Failures without RetryInfo are never retried.
//
// It is an alternative to a retry policy in the service config (which
// honours the grpc-retry-pushback-ms trailer of the same denials); use one
// or the other, or the retries multiply.
func UnaryClientInterceptor(opts ...ClientOption) grpc.UnaryClientInterceptor {
	c := &clientConfig{retries: DefaultRetries, maxDelay: DefaultMaxRetryDelay}
	for _, opt := range opts {
		if opt != nil {
			opt(c)
		}
	}
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
		for attempt := 0; ; attempt++ {
			err := invoker(ctx, method, req, reply, cc, callOpts...)
			if err == nil || attempt == c.retries {
				return err
			}
			delay, ok := RetryDelay(err)
			if !ok || delay > c.maxDelay {
				return err
			}
			if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) <= delay {
				return err
			}
			t := time.NewTimer(delay)
			select {
			case <-ctx.Done():
				t.Stop()
				return status.FromContextError(ctx.Err()).Err()
			case <-t.C:
			}
		}
	}
}

// RetryDelay returns the retry delay of err's google.rpc.RetryInfo detail,
// and false if err carries no gRPC status with one.
func RetryDelay(err error) (time.Duration, bool) {
	if err == nil {
		return 0, false
	}
	st, ok := status.FromError(err)
	if !ok {
		return 0, false
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			if err := ri.GetRetryDelay().CheckValid(); err != nil {
				return 0, false
			}
			return max(ri.GetRetryDelay().AsDuration(), 0), true
		}
	}
	return 0, false
}
