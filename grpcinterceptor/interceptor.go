package grpclimit

import (
	"context"
	"sync"

	slidelimit "github.com/slidelimit/slidelimit/core"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// UnaryServerInterceptor returns an interceptor that counts each unary call
// against lim, the limiter of every method that WithMethodLimiters or
// WithLimiterFunc does not give another; a nil lim leaves those methods
// unlimited. The caller is identified by WithKey, by default its IP address.
//
// A denied call ends with codes.ResourceExhausted, before the handler runs.
// Its status details are a google.rpc.RetryInfo, whose retry_delay is how
// long until the call would be admitted, and a google.rpc.QuotaFailure
// whose violations name each denying policy (slidelimit.Limit.String),
// never the caller. Its trailers carry grpc-retry-pushback-ms, so that a
// client whose service config has a retry policy for RESOURCE_EXHAUSTED
// retries when the quota is back, and the rate-limit fields (WithHeaders).
// No response header is sent: a header would commit the call and stop the
// client from retrying.
//
// An allowed call carries the rate-limit fields in its response headers,
// added when the handler returns successfully (WithoutHeaders turns them
// off); when the handler fails they go to the trailers instead, so that
// the handler's own error stays retryable too.
//
// When Redis fails or is slower than the limiter's timeout
// (slidelimit.WithTimeout), the limiter's failure policy decides: fail-open
// lets the call through, fail-closed refuses it with codes.Unavailable and
// a RetryInfo, never codes.ResourceExhausted. The error goes to the
// ErrorHook either way.
func UnaryServerInterceptor(lim *slidelimit.Limiter, opts ...Option) grpc.UnaryServerInterceptor {
	c := newConfig(lim, opts)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		r := c.newCall(ctx, info.FullMethod)
		v := c.verdictOf(ctx, c.flow.Decide(ctx, r), true)
		if v.err != nil {
			if len(v.md) > 0 {
				_ = grpc.SetTrailer(ctx, v.md) // fails only outside a gRPC server
			}
			return nil, v.err
		}
		resp, err := handler(ctx, req)
		c.flow.Finish(ctx, r, v.d, int(status.Code(err)))
		if len(v.md) > 0 {
			// A handler that sent its headers itself leaves SetHeader
			// failing; the fields then go to the trailers.
			if err != nil || grpc.SetHeader(ctx, v.md) != nil {
				_ = grpc.SetTrailer(ctx, v.md)
			}
		}
		return resp, err
	}
}

// StreamServerInterceptor returns an interceptor that counts each stream
// once, when it opens, against lim, chosen and keyed as in
// UnaryServerInterceptor, and answers a denied stream in the same way,
// before the handler runs. WithoutStreamOpenLimit turns this count off.
//
// WithMessageLimit also counts each message the stream receives: once its
// limiter denies, RecvMsg returns a codes.ResourceExhausted status with the
// same details, and the stream's trailers get the same fields.
//
// An allowed stream's rate-limit fields join its response headers when the
// handler first sends a header or a message; a handler that fails before
// sending either gets them in its trailers instead.
func StreamServerInterceptor(lim *slidelimit.Limiter, opts ...Option) grpc.StreamServerInterceptor {
	c := newConfig(lim, opts)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx := ss.Context()
		r := c.newCall(ctx, info.FullMethod)
		if c.flow.Skip(r) {
			return handler(srv, ss)
		}
		w := &serverStream{ServerStream: ss, c: c, r: r}
		var open verdict // the stream's opening count, for a refund
		if !c.noOpenLimit {
			open = c.verdictOf(ctx, c.flow.Limit(ctx, r), true)
			if open.err != nil {
				if len(open.md) > 0 {
					ss.SetTrailer(open.md)
				}
				return open.err
			}
			w.header = open.md
		}
		if c.msgLimiter != nil {
			w.msgLimiter, w.msgID = c.msgLimiter, open.d.Identity
			if c.msgKey != nil || w.msgID == "" {
				key := c.msgKey
				if key == nil {
					key = c.key
				}
				id, err := c.identify(r, key)
				if err != nil {
					return err
				}
				w.msgID = id
			}
		}
		if w.header == nil && w.msgLimiter == nil {
			err := handler(srv, ss) // nothing to add: no wrapper
			c.flow.Finish(ctx, r, open.d, int(status.Code(err)))
			return err
		}
		err := handler(srv, w)
		c.flow.Finish(ctx, r, open.d, int(status.Code(err)))
		if md := w.takeHeader(); md != nil {
			if err != nil || ss.SetHeader(md) != nil {
				ss.SetTrailer(md)
			}
		}
		return err
	}
}

// serverStream adds the rate-limit fields to a stream's headers when they
// are sent, and limits the messages it receives.
type serverStream struct {
	grpc.ServerStream
	c          *config
	r          rpc
	msgLimiter *slidelimit.Limiter // nil: messages are not limited
	msgID      string

	mu     sync.Mutex
	header metadata.MD // fields not yet added to the headers
}

// takeHeader returns the fields not yet added, once.
func (s *serverStream) takeHeader() metadata.MD {
	s.mu.Lock()
	defer s.mu.Unlock()
	md := s.header
	s.header = nil
	return md
}

// addHeader adds the pending fields before the headers go out.
func (s *serverStream) addHeader() {
	if md := s.takeHeader(); md != nil {
		if s.SetHeader(md) != nil { // headers already sent another way
			s.SetTrailer(md)
		}
	}
}

// SendHeader sends the headers, with the rate-limit fields.
func (s *serverStream) SendHeader(md metadata.MD) error {
	s.addHeader()
	return s.ServerStream.SendHeader(md)
}

// SendMsg sends m, after the headers with the rate-limit fields.
func (s *serverStream) SendMsg(m any) error {
	s.addHeader()
	return s.ServerStream.SendMsg(m)
}

// RecvMsg receives a message and, under WithMessageLimit, counts it.
func (s *serverStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil || s.msgLimiter == nil {
		return err
	}
	ctx := s.Context()
	v := s.c.verdictOf(ctx, s.c.flow.Check(ctx, s.r, s.msgLimiter, s.msgID, 1), false)
	if v.err != nil {
		s.takeHeader() // the stream's fields would contradict the message's
		if len(v.md) > 0 {
			s.SetTrailer(v.md)
		}
	}
	return v.err
}
