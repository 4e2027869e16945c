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
// unlimited. The caller is identified by WithKey, by default its IP address,
// or held to its tenant's tree of limits (WithTree).
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
// A call admitted under an in-flight limit (slidelimit.InFlight) holds its
// place while the handler runs, renewed for as long as it runs, and
// releases it when the handler returns or panics; with WithSettle, the
// call is settled from its response in the same round trip.
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
		p := c.flow.Pend(ctx, r, v.d)
		defer p.Abort() // a panic releases the places in flight
		hctx := ctx
		if p.Captures() {
			hctx = recording(ctx, r.out)
		}
		resp, err := handler(hctx, req)
		if p.Captures() && err == nil {
			r.out.sent(resp)
		}
		p.End(int(status.Code(err)), nil)
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
//
// A stream admitted under an in-flight limit holds its place until its
// handler returns; with WithSettle, it is settled then, from its last sent
// message and its trailer.
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
		p := c.flow.Pend(ctx, r, open.d)
		defer p.Abort() // a panic releases the places in flight
		if p.Captures() {
			w.out, w.ctx = r.out, recording(ctx, r.out)
		}
		if w.header == nil && w.msgLimiter == nil && w.out == nil {
			err := handler(srv, ss) // nothing to add: no wrapper
			p.End(int(status.Code(err)), nil)
			return err
		}
		err := handler(srv, w)
		p.End(int(status.Code(err)), nil)
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
	out        *outcome        // what the handler sends, for WithSettle; nil without it
	ctx        context.Context // the stream's context, recording trailers for out

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
			s.ServerStream.SetTrailer(md)
		}
	}
}

// SendHeader sends the headers, with the rate-limit fields.
func (s *serverStream) SendHeader(md metadata.MD) error {
	s.addHeader()
	return s.ServerStream.SendHeader(md)
}

// SendMsg sends m, after the headers with the rate-limit fields, and
// records it for WithSettle.
func (s *serverStream) SendMsg(m any) error {
	s.addHeader()
	err := s.ServerStream.SendMsg(m)
	if err == nil && s.out != nil {
		s.out.sent(m)
	}
	return err
}

// SetTrailer sets the trailer, and records it for WithSettle.
func (s *serverStream) SetTrailer(md metadata.MD) {
	s.ServerStream.SetTrailer(md)
	if s.out != nil {
		s.out.setTrailer(md)
	}
}

// Context returns the stream's context, in which grpc.SetTrailer is
// recorded for WithSettle too.
func (s *serverStream) Context() context.Context {
	if s.ctx != nil {
		return s.ctx
	}
	return s.ServerStream.Context()
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
			s.ServerStream.SetTrailer(v.md)
		}
	}
	return v.err
}
