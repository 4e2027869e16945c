package grpclimit_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
	"github.com/slidelimit/slidelimit/grpcinterceptor/grpctest"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// server is a running gRPC server on a loopback TCP port.
type server struct {
	addr string
	echo *grpctest.Echo
	// attempts counts the calls that reach the server, before any limit.
	attempts atomic.Int64
}

// startServer serves the echo and health services on 127.0.0.1 with the
// given interceptors, outermost first, behind one that counts attempts.
func startServer(t *testing.T, unary []grpc.UnaryServerInterceptor, stream []grpc.StreamServerInterceptor) *server {
	t.Helper()
	s := &server{echo: new(grpctest.Echo)}
	count := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		s.attempts.Add(1)
		return h(ctx, req)
	}
	countStream := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		s.attempts.Add(1)
		return h(srv, ss)
	}
	gs := grpc.NewServer(
		grpc.ChainUnaryInterceptor(append([]grpc.UnaryServerInterceptor{count}, unary...)...),
		grpc.ChainStreamInterceptor(append([]grpc.StreamServerInterceptor{countStream}, stream...)...),
	)
	s.echo.Register(gs)
	healthpb.RegisterHealthServer(gs, health.NewServer())
	s.addr = grpctest.Serve(t, gs)
	return s
}

// newLimiter returns a limiter of limit on rdb, under the test's own prefix.
func newLimiter(t *testing.T, rdb redis.Scripter, limit slidelimit.Limit, opts ...slidelimit.Option) *slidelimit.Limiter {
	t.Helper()
	lim, err := slidelimit.New(rdb, limit, append([]slidelimit.Option{slidelimit.WithPrefix(redistest.Prefix(t))}, opts...)...)
	if err != nil {
		t.Fatalf("slidelimit.New(%v): %v", limit, err)
	}
	return lim
}

// reply is the outcome of one unary call.
type reply struct {
	err     error
	header  metadata.MD
	trailer metadata.MD
}

func (r reply) code() codes.Code { return status.Code(r.err) }

// say calls Say with msg and the outgoing metadata kv.
func say(ctx context.Context, conn *grpc.ClientConn, msg string, kv ...string) reply {
	var r reply
	if len(kv) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, kv...)
	}
	out := new(wrapperspb.StringValue)
	r.err = conn.Invoke(ctx, grpctest.MethodSay, wrapperspb.String(msg), out, grpc.Header(&r.header), grpc.Trailer(&r.trailer))
	return r
}

// details returns the RetryInfo and QuotaFailure of err; nil for a missing one.
func details(err error) (*errdetails.RetryInfo, *errdetails.QuotaFailure) {
	var ri *errdetails.RetryInfo
	var qf *errdetails.QuotaFailure
	for _, d := range status.Convert(err).Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			ri = d
		case *errdetails.QuotaFailure:
			qf = d
		}
	}
	return ri, qf
}

// rateLimitKeys are the metadata keys of the rate-limit fields.
var rateLimitKeys = []string{"ratelimit", "ratelimit-policy", "x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset", "retry-after"}

// rateLimitFields returns the rate-limit fields md holds.
func rateLimitFields(md metadata.MD) metadata.MD {
	out := metadata.MD{}
	for _, k := range rateLimitKeys {
		if v := md.Get(k); len(v) > 0 {
			out[k] = v
		}
	}
	return out
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
