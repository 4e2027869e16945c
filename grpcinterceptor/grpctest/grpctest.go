package grpctest

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Names of the service and of its methods, as a client calls them.
const (
	// ServiceName is the service's full name.
	ServiceName = "slidelimit.test.Echo"
	// MethodSay is the full name of the unary method Say.
	MethodSay = "/" + ServiceName + "/Say"
	// MethodChat is the full name of the bidirectional stream Chat.
	MethodChat = "/" + ServiceName + "/Chat"
)

// FailWord is the message that makes Say fail with
// codes.FailedPrecondition, as a handler's own error.
const FailWord = "fail"

// ChatDesc describes Chat to grpc.ClientConn.NewStream.
var ChatDesc = &grpc.StreamDesc{StreamName: "Chat", ServerStreams: true, ClientStreams: true}

// Echo is the service. Its zero value is ready to register; it is safe
// for concurrent use.
type Echo struct {
	handled atomic.Int64
}

// Register registers e on s.
func (e *Echo) Register(s grpc.ServiceRegistrar) {
	s.RegisterService(&desc, e)
}

// Handled returns how many calls have reached e's handlers: each Say call
// and each Chat stream counts once.
func (e *Echo) Handled() int64 { return e.handled.Load() }

var desc = grpc.ServiceDesc{
	ServiceName: ServiceName,
	HandlerType: (*any)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "Say", Handler: sayHandler}},
	Streams: []grpc.StreamDesc{{
		StreamName: "Chat", Handler: chatHandler, ServerStreams: true, ClientStreams: true,
	}},
}

func sayHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) { //nolint:revive // the shape of grpc.MethodHandler
	in := new(wrapperspb.StringValue)
	if err := dec(in); err != nil {
		return nil, err
	}
	h := func(_ context.Context, req any) (any, error) {
		srv.(*Echo).handled.Add(1)
		in, _ := req.(*wrapperspb.StringValue)
		s := in.GetValue()
		if s == FailWord {
			return nil, status.Error(codes.FailedPrecondition, "asked to fail")
		}
		return wrapperspb.String(s), nil
	}
	if interceptor == nil {
		return h(ctx, in)
	}
	return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: MethodSay}, h)
}

func chatHandler(srv any, stream grpc.ServerStream) error {
	srv.(*Echo).handled.Add(1)
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

// Serve serves gs on a free port of 127.0.0.1 until the test ends, then
// stops it, and returns its address.
func Serve(t testing.TB, gs *grpc.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("grpctest: listen: %v", err)
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

// Dial returns a client connection to addr without TLS, with opts after
// that, closed when the test ends.
func Dial(t testing.TB, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatalf("grpctest: grpc.NewClient(%s): %v", addr, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}
