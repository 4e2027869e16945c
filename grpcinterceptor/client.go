package grpclimit

import (
	"context"
	"errors"
	"time"

	slidelimit "github.com/slidelimit/slidelimit/core"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
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

// ClientOption configures the client interceptors: UnaryClientInterceptor,
// UnaryClientWaitInterceptor and StreamClientWaitInterceptor.
type ClientOption func(*clientConfig)

type clientConfig struct {
	retries  int
	maxDelay time.Duration
	block    *slidelimit.Limiter // records servers' throttles; nil: none
	key      ClientKeyFunc
	cost     func(ctx context.Context, method string) int
}

// newClientConfig applies opts to the defaults.
func newClientConfig(opts []ClientOption) *clientConfig {
	c := &clientConfig{retries: DefaultRetries, maxDelay: DefaultMaxRetryDelay, key: ClientKeyByTarget}
	for _, opt := range opts {
		if opt != nil {
			opt(c)
		}
	}
	return c
}

// ClientKeyFunc names the limit an outgoing call counts against: the
// identity the client interceptors wait on and block.
type ClientKeyFunc func(ctx context.Context, method string, cc *grpc.ClientConn) (string, error)

// ClientKeyByTarget keys an outgoing call by the target its connection
// dials, as "target:" and cc.Target(): every call to one server or service
// shares one limit. It is the client interceptors' default key.
func ClientKeyByTarget(_ context.Context, _ string, cc *grpc.ClientConn) (string, error) {
	if cc == nil {
		return "", errors.New("grpclimit: call has no connection to key by")
	}
	return "target:" + cc.Target(), nil
}

// ClientKeyByMethod keys an outgoing call by its full method name, as
// "method:/pkg.Service/Method", for a partner whose quota is per method.
func ClientKeyByMethod(_ context.Context, method string, _ *grpc.ClientConn) (string, error) {
	return "method:" + method, nil
}

// WithClientKey sets the function that keys outgoing calls, for the wait
// interceptors and for the blocks WithBlock records. The default is
// ClientKeyByTarget.
func WithClientKey(f ClientKeyFunc) ClientOption {
	return func(c *clientConfig) {
		if f != nil {
			c.key = f
		}
	}
}

// WithClientCost sets the cost of an outgoing call for the wait
// interceptors; a result below 1 counts as 1. The default costs every call 1.
func WithClientCost(f func(ctx context.Context, method string) int) ClientOption {
	return func(c *clientConfig) { c.cost = f }
}

// WithBlock makes UnaryClientInterceptor record a server's throttle in
// lim: when a call fails with codes.ResourceExhausted and a RetryInfo, the
// call's key (WithClientKey) is blocked for the retry delay
// (slidelimit.Limiter.Block), so that every process waiting on lim with
// the wait interceptors stops calling until then, not only this call. The
// wait interceptors record throttles in their own limiter without it.
func WithBlock(lim *slidelimit.Limiter) ClientOption {
	return func(c *clientConfig) { c.block = lim }
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
// Failures without RetryInfo are never retried. With WithBlock, a
// ResourceExhausted with RetryInfo also blocks the call's key fleet-wide.
//
// It is an alternative to a retry policy in the service config (which
// honours the grpc-retry-pushback-ms trailer of the same denials); use one
// or the other, or the retries multiply.
func UnaryClientInterceptor(opts ...ClientOption) grpc.UnaryClientInterceptor {
	c := newClientConfig(opts)
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
		for attempt := 0; ; attempt++ {
			err := invoker(ctx, method, req, reply, cc, callOpts...)
			if c.block != nil {
				c.recordThrottle(ctx, c.block, method, cc, err)
			}
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

// UnaryClientWaitInterceptor returns a client interceptor that limits
// outgoing calls with lim: before sending a call it waits, within the
// call's context, until lim admits it under the call's key (by default
// the connection's target; see WithClientKey and WithClientCost), as
// slidelimit.Limiter.WaitN does. When the server answers
// codes.ResourceExhausted with a RetryInfo, it blocks the key for the
// retry delay (slidelimit.Limiter.Block), so that every process sharing
// lim stops calling until then.
//
// A call whose answer comes more than 25 ms after its admission (it waited
// for a connection to be dialed, or for a busy server) has its admission
// moved to when the answer came (slidelimit.Limiter.Shift), as
// httplimit.Transport does: the server counted it by then, so no call
// admitted later can reach it within a window of one it counted.
//
// A call that cannot be admitted before its context ends is not sent: it
// fails with the context's status, or at once with codes.DeadlineExceeded
// when the deadline comes before the limit or a block could admit it. It
// sets nothing on the outgoing call. Chain it inside
// UnaryClientInterceptor, so that each retry waits its turn:
//
//	grpc.WithChainUnaryInterceptor(
//		grpclimit.UnaryClientInterceptor(grpclimit.WithBlock(lim)),
//		grpclimit.UnaryClientWaitInterceptor(lim),
//	)
//
// Options other than WithClientKey and WithClientCost are ignored.
func UnaryClientWaitInterceptor(lim *slidelimit.Limiter, opts ...ClientOption) grpc.UnaryClientInterceptor {
	c := newClientConfig(opts)
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
		res, err := c.wait(ctx, lim, method, cc)
		if err != nil {
			return err
		}
		admitted := time.Now()
		err = invoker(ctx, method, req, reply, cc, callOpts...)
		if !res.Fallback {
			shiftIfLate(ctx, lim, res, admitted)
		}
		c.recordThrottle(ctx, lim, method, cc, err)
		return err
	}
}

// answeredLate is how long after its admission a call's answer (or a
// stream's opening) may come before UnaryClientWaitInterceptor
// (StreamClientWaitInterceptor) moves its admission to when it came
// (slidelimit.Limiter.Shift), as httplimit.Transport does for a request:
// a server counts a call when it arrives, at the latest when it answers,
// so a call that waited for a connection, or for a busy server, would
// otherwise be counted by the server in a window the limiter has moved
// past. A window's margin covers what arrives sooner.
const answeredLate = 25 * time.Millisecond

// shiftIfLate moves the admission res, made at admitted, to now if that is
// more than answeredLate later: off the caller's goroutine, and owed even
// if the caller is gone. A failure is dropped: the call has been made, and
// the limiter reports an outage itself.
func shiftIfLate(ctx context.Context, lim *slidelimit.Limiter, res slidelimit.Result, admitted time.Time) {
	if late := time.Since(admitted); late > answeredLate {
		ctx = context.WithoutCancel(ctx)
		go func() { _ = lim.Shift(ctx, res, late) }()
	}
}

// StreamClientWaitInterceptor is UnaryClientWaitInterceptor for streams:
// it waits for the limit before opening a stream, and blocks the key when
// the stream fails with codes.ResourceExhausted and a RetryInfo, whether
// opening it or receiving from it. A stream that opens more than 25 ms
// after its admission (it waited for a connection to be dialed) has its
// admission moved to when it opened, as a late unary answer does: the
// server counts a stream when it opens. Messages on an open stream are not
// limited.
func StreamClientWaitInterceptor(lim *slidelimit.Limiter, opts ...ClientOption) grpc.StreamClientInterceptor {
	c := newClientConfig(opts)
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, callOpts ...grpc.CallOption) (grpc.ClientStream, error) {
		res, err := c.wait(ctx, lim, method, cc)
		if err != nil {
			return nil, err
		}
		admitted := time.Now()
		cs, err := streamer(ctx, desc, cc, method, callOpts...)
		if !res.Fallback {
			shiftIfLate(ctx, lim, res, admitted)
		}
		if err != nil {
			c.recordThrottle(ctx, lim, method, cc, err)
			return nil, err
		}
		return &throttleStream{ClientStream: cs, record: func(err error) { c.recordThrottle(ctx, lim, method, cc, err) }}, nil
	}
}

// throttleStream records a throttle the server reports on a stream.
type throttleStream struct {
	grpc.ClientStream
	record func(error)
}

// RecvMsg receives a message, and records a throttle that ends the stream.
func (s *throttleStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil {
		s.record(err)
	}
	return err
}

// wait waits until lim admits the call, and returns the admission; the
// error is a gRPC status.
func (c *clientConfig) wait(ctx context.Context, lim *slidelimit.Limiter, method string, cc *grpc.ClientConn) (slidelimit.Result, error) {
	if lim == nil {
		return slidelimit.Result{}, status.Error(codes.Internal, "grpclimit: client wait interceptor has no limiter")
	}
	key, err := c.key(ctx, method, cc)
	if err != nil {
		return slidelimit.Result{}, status.Errorf(codes.Internal, "grpclimit: key of %s: %v", method, err)
	}
	n := 1
	if c.cost != nil {
		n = max(c.cost(ctx, method), 1)
	}
	res, err := lim.WaitN(ctx, key, n)
	switch {
	case err == nil || res.Allowed:
		return res, nil // or a Fallback admission: the FailurePolicy said send
	case errors.Is(err, slidelimit.ErrWouldExceedDeadline):
		return res, status.Errorf(codes.DeadlineExceeded, "grpclimit: %s: %v", key, err)
	case ctx.Err() != nil:
		return res, status.FromContextError(ctx.Err()).Err()
	case errors.Is(err, slidelimit.ErrInvalidCost), errors.Is(err, slidelimit.ErrInvalidKey):
		return res, status.Errorf(codes.Internal, "grpclimit: %v", err)
	}
	return res, status.Errorf(codes.Unavailable, "grpclimit: %v", err)
}

// recordThrottle blocks the call's key in lim when err is a
// ResourceExhausted status with a RetryInfo. A failure to record it is
// dropped: the call's own error is what the caller needs.
func (c *clientConfig) recordThrottle(ctx context.Context, lim *slidelimit.Limiter, method string, cc *grpc.ClientConn, err error) {
	if status.Code(err) != codes.ResourceExhausted {
		return
	}
	delay, ok := RetryDelay(err)
	if !ok || delay <= 0 {
		return
	}
	key, kerr := c.key(ctx, method, cc)
	if kerr != nil {
		return
	}
	_ = lim.Block(context.WithoutCancel(ctx), key, delay)
}
