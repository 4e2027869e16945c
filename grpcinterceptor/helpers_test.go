package grpclimit_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The test service, slidelimit.test.Echo, is written by hand instead of
// generated: Say is unary, Chat a bidirectional stream, both of
// google.protobuf.StringValue.
const (
	methodSay  = "/slidelimit.test.Echo/Say"
	methodChat = "/slidelimit.test.Echo/Chat"
	// failWord makes Say fail with codes.FailedPrecondition.
	failWord = "fail"
)

var echoDesc = grpc.ServiceDesc{
	ServiceName: "slidelimit.test.Echo",
	HandlerType: (*any)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "Say", Handler: sayHandler}},
	Streams: []grpc.StreamDesc{{
		StreamName: "Chat", Handler: chatHandler, ServerStreams: true, ClientStreams: true,
	}},
}

var chatDesc = &grpc.StreamDesc{StreamName: "Chat", ServerStreams: true, ClientStreams: true}

// echoServer counts the calls that reach its handlers.
type echoServer struct {
	handled atomic.Int64
}

func sayHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) { //nolint:revive // the shape of grpc.MethodHandler
	in := new(wrapperspb.StringValue)
	if err := dec(in); err != nil {
		return nil, err
	}
	h := func(_ context.Context, req any) (any, error) {
		srv.(*echoServer).handled.Add(1)
		s := req.(*wrapperspb.StringValue).GetValue()
		if s == failWord {
			return nil, status.Error(codes.FailedPrecondition, "asked to fail")
		}
		return wrapperspb.String(s), nil
	}
	if interceptor == nil {
		return h(ctx, in)
	}
	return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: methodSay}, h)
}

func chatHandler(srv any, stream grpc.ServerStream) error {
	srv.(*echoServer).handled.Add(1)
	for {
		in := new(wrapperspb.StringValue)
		if err := stream.RecvMsg(in); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if err := stream.SendMsg(in); err != nil {
			return err
		}
	}
}

// server is a running gRPC server on a loopback TCP port.
type server struct {
	addr string
	echo *echoServer
	// attempts counts the calls that reach the server, before any limit.
	attempts atomic.Int64
}

// startServer serves the echo and health services on 127.0.0.1 with the
// given interceptors, outermost first, behind one that counts attempts.
func startServer(t *testing.T, unary []grpc.UnaryServerInterceptor, stream []grpc.StreamServerInterceptor) *server {
	t.Helper()
	s := &server{echo: new(echoServer)}
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
	gs.RegisterService(&echoDesc, s.echo)
	healthpb.RegisterHealthServer(gs, health.NewServer())
	s.addr = serveGRPC(t, gs)
	return s
}

// serveGRPC serves gs on a free port of 127.0.0.1 until the test ends and
// returns its address.
func serveGRPC(t *testing.T, gs *grpc.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = gs.Serve(ln)
	}()
	t.Cleanup(func() {
		gs.Stop()
		wg.Wait()
	})
	return ln.Addr().String()
}

// dial connects to addr without TLS.
func dial(t *testing.T, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatalf("grpc.NewClient(%s): %v", addr, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// newLimiter returns a limiter of limit on rdb, under the test's own prefix.
func newLimiter(t *testing.T, rdb redis.Scripter, limit slidelimit.Limit, opts ...slidelimit.Option) *slidelimit.Limiter {
	t.Helper()
	lim, err := slidelimit.New(rdb, limit, append([]slidelimit.Option{slidelimit.WithPrefix(prefix(t))}, opts...)...)
	if err != nil {
		t.Fatalf("slidelimit.New(%v): %v", limit, err)
	}
	return lim
}

// prefix returns redistest.Prefix(t), cut to the 64 bytes a key prefix may
// have: a long test name makes it longer, and its random tail keeps it
// unique.
func prefix(t *testing.T) string {
	p := redistest.Prefix(t)
	if len(p) > 64 {
		p = "test:" + p[len(p)-59:]
	}
	return p
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
	r.err = conn.Invoke(ctx, methodSay, wrapperspb.String(msg), out, grpc.Header(&r.header), grpc.Trailer(&r.trailer))
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
