package grpclimit

import (
	"context"
	"sync"

	"github.com/slidelimit/slidelimit/core/adapter"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
)

// Response is what a settle function is given of a call once its handler
// has returned (WithSettle).
type Response struct {
	// Code is the call's status code: codes.OK, or the code of the
	// handler's error.
	Code codes.Code
	// Message is a unary handler's response, nil when it failed; for a
	// stream, the last message the handler sent, nil if none. It is the
	// handler's own value: a handler that reuses one message for every
	// send leaves it holding the last.
	Message any
	// Trailer holds the trailer metadata the handler set, with
	// grpc.SetTrailer or the stream's SetTrailer, joined; nil if none.
	Trailer metadata.MD
}

// WithSettle settles each admitted call from its response: once the
// handler has returned, f is given the call's context and Call and its
// Response (its code, its response message, or a stream's last, and the
// trailer metadata the handler set) and returns the call's actual cost,
// and whether it knows it. The call is then settled to that cost
// (slidelimit.Limiter.Settle) at the time it was admitted, so that a cost
// known only after the call, such as an LLM's tokens, counts exactly:
// admit an estimate (WithCost, such as the request's max_tokens), and
// settle what it used, read from the response or a trailer:
//
//	grpclimit.WithSettle(func(_ context.Context, _ grpclimit.Call, r grpclimit.Response) (int, bool) {
//		resp, ok := r.Message.(*pb.CompletionResponse)
//		return int(resp.GetUsage().GetTotalTokens()), ok
//	})
//
// A stream is settled when its handler returns, after its last message.
// When f does not know, the call keeps its estimate. The settlement
// releases the call's places in flight too, in one Redis round trip; a
// call a refund option gives back is refunded instead. For a stream, it is
// the units its opening took that are settled. The default settles
// nothing: a call keeps the cost it was admitted for.
func WithSettle(f func(ctx context.Context, call Call, r Response) (actual int, ok bool)) Option {
	return func(c *config) { c.settle = f }
}

// outcome gathers what a call's settle function is given, as the handler
// sends and sets it.
type outcome struct {
	mu      sync.Mutex
	msg     any
	trailer metadata.MD
}

func (o *outcome) sent(m any) {
	o.mu.Lock()
	o.msg = m
	o.mu.Unlock()
}

func (o *outcome) setTrailer(md metadata.MD) {
	o.mu.Lock()
	o.trailer = metadata.Join(o.trailer, md)
	o.mu.Unlock()
}

// response returns the Response of a call that ended with code.
func (o *outcome) response(code int) Response {
	o.mu.Lock()
	defer o.mu.Unlock()
	return Response{Code: codes.Code(code), Message: o.msg, Trailer: o.trailer}
}

// settleFunc returns the flow's settle function, nil without WithSettle.
func (c *config) settleFunc() func(rpc, adapter.Response) (int, bool) {
	if c.settle == nil {
		return nil
	}
	return func(r rpc, resp adapter.Response) (int, bool) {
		if r.out == nil {
			return 0, false
		}
		return c.settle(r.ctx, r.call, r.out.response(resp.Status))
	}
}

// trailerStream records the trailer metadata a handler sets through
// grpc.SetTrailer on the call's context.
type trailerStream struct {
	grpc.ServerTransportStream
	out *outcome
}

// SetTrailer sets the trailer, and records it.
func (s *trailerStream) SetTrailer(md metadata.MD) error {
	err := s.ServerTransportStream.SetTrailer(md)
	if err == nil {
		s.out.setTrailer(md)
	}
	return err
}

// recording returns ctx, whose trailer metadata set with grpc.SetTrailer
// is recorded in out too.
func recording(ctx context.Context, out *outcome) context.Context {
	if ts := grpc.ServerTransportStreamFromContext(ctx); ts != nil {
		return grpc.NewContextWithServerTransportStream(ctx, &trailerStream{ServerTransportStream: ts, out: out})
	}
	return ctx
}
