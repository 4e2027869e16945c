package grpclimit

import (
	"context"

	slidelimit "github.com/slidelimit/slidelimit/core"
	"google.golang.org/grpc"
)

// Limiter adapts a slidelimit.Limiter to interceptors that take a limiter
// with the one method Limit(ctx) error, such as those of go-grpc-middleware
// v2's ratelimit package:
//
//	ratelimit.UnaryServerInterceptor(grpclimit.NewLimiter(lim))
//
// The interceptors of this package do more, and are the better choice:
// go-grpc-middleware turns every error from Limit into a
// codes.ResourceExhausted status whose message quotes it, so the status
// details, and the codes.Unavailable of a fail-closed Redis failure, are
// lost. The trailers Limit sets (the retry pushback and the rate-limit
// fields) reach the client all the same. No rate-limit field is sent on
// allowed calls.
//
// A Limiter is safe for concurrent use.
type Limiter struct {
	c *config
}

// NewLimiter returns a Limiter that counts calls against lim, chosen, keyed
// and skipped as the options say, as for UnaryServerInterceptor, with the
// cost of WithCost. The stream options (WithoutStreamOpenLimit,
// WithMessageLimit) do not apply, nor do the refund options: Limit never
// sees how the call ends.
func NewLimiter(lim *slidelimit.Limiter, opts ...Option) *Limiter {
	return &Limiter{c: newConfig(lim, opts)}
}

// Limit counts one call (WithCost units), whose method it reads from the server context,
// and returns nil if the call may go on. Otherwise it returns the status
// error UnaryServerInterceptor would, after setting the call's trailers.
func (l *Limiter) Limit(ctx context.Context) error {
	method, _ := grpc.Method(ctx)
	v := l.c.verdictOf(ctx, l.c.flow.Decide(ctx, l.c.newCall(ctx, method)), false)
	if v.err != nil && len(v.md) > 0 {
		_ = grpc.SetTrailer(ctx, v.md) // fails only outside a gRPC server
	}
	return v.err
}
