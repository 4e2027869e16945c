package grpclimit_test

import (
	"context"
	"testing"
	"time"

	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
	grpclimit "github.com/slidelimit/slidelimit/grpcinterceptor"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// middlewareLimiter has the method set of the Limiter interface of
// go-grpc-middleware v2's ratelimit package, declared here so that the
// module needs no dependency on it.
type middlewareLimiter interface {
	Limit(ctx context.Context) error
}

var _ middlewareLimiter = (*grpclimit.Limiter)(nil)

// limitInterceptor does what a go-grpc-middleware style interceptor does
// with a middlewareLimiter: refuse the call with the error Limit returns.
func limitInterceptor(l middlewareLimiter) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if err := l.Limit(ctx); err != nil {
			return nil, err
		}
		return h(ctx, req)
	}
}

func TestLimiter(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, redistest.Client(t), slidelimit.Per(5, 10*time.Second))
	l := grpclimit.NewLimiter(lim, grpclimit.WithSkipMethods("grpc.health.v1.Health"))
	srv := startServer(t, []grpc.UnaryServerInterceptor{limitInterceptor(l)}, nil)
	conn := dial(t, srv.addr)
	for i := range 5 {
		if r := say(t.Context(), conn, "hi"); r.err != nil {
			t.Fatalf("call %d: Say() = %v, want OK", i+1, r.err)
		}
	}
	r := say(t.Context(), conn, "hi")
	if r.code() != codes.ResourceExhausted {
		t.Fatalf("call 6: Say() = %v, want ResourceExhausted", r.err)
	}
	if ri, qf := details(r.err); ri == nil || qf == nil {
		t.Errorf("call 6: details = %v, want RetryInfo and QuotaFailure", status.Convert(r.err).Details())
	}
	if got := r.trailer.Get(grpclimit.PushbackKey); len(got) != 1 {
		t.Errorf("call 6: trailer %s = %q, want one value", grpclimit.PushbackKey, got)
	}
	if got := rateLimitFields(r.header); len(got) != 0 {
		t.Errorf("call 6: header fields = %v, want none", got)
	}
}

// TestLimiterOutsideServer calls Limit on a context that is no server's:
// no peer, no method. It must not panic, and the default key fails.
func TestLimiterOutsideServer(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, redistest.Client(t), slidelimit.PerMinute(5))
	err := grpclimit.NewLimiter(lim, grpclimit.WithErrorHook(nil)).Limit(t.Context())
	if status.Code(err) != codes.Internal {
		t.Errorf("Limit(background) = %v, want Internal: no peer IP", err)
	}
	err = grpclimit.NewLimiter(lim, grpclimit.WithKey(grpclimit.KeyByMethod)).Limit(t.Context())
	if err != nil {
		t.Errorf("Limit(background) keyed by method = %v, want nil", err)
	}
}
