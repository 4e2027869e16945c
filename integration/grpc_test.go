package integration

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"

	slidelimit "github.com/slidelimit/slidelimit/core"
	grpclimit "github.com/slidelimit/slidelimit/grpcinterceptor"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The gRPC test service, slidelimit.integration.Echo, is written by hand
// instead of generated: Say is unary, Chat a bidirectional stream, both of
// google.protobuf.StringValue.
const (
	methodSay  = "/slidelimit.integration.Echo/Say"
	methodChat = "/slidelimit.integration.Echo/Chat"
	// apiKeyMetadata is the metadata key the gRPC servers key calls by.
	apiKeyMetadata = "x-api-key"
)

var echoDesc = grpc.ServiceDesc{
	ServiceName: "slidelimit.integration.Echo",
	HandlerType: (*any)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "Say", Handler: sayHandler}},
	Streams: []grpc.StreamDesc{{
		StreamName: "Chat", Handler: chatHandler, ServerStreams: true, ClientStreams: true,
	}},
}

var chatDesc = &grpc.StreamDesc{StreamName: "Chat", ServerStreams: true, ClientStreams: true}

func sayHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) { //nolint:revive // the shape of grpc.MethodHandler
	in := new(wrapperspb.StringValue)
	if err := dec(in); err != nil {
		return nil, err
	}
	h := func(_ context.Context, req any) (any, error) { return req, nil }
	if interceptor == nil {
		return h(ctx, in)
	}
	return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: methodSay}, h)
}

func chatHandler(_ any, stream grpc.ServerStream) error {
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

// startGRPC serves the echo service on a loopback port behind grpclimit's
// unary and stream interceptors, keyed by the x-api-key metadata, and
// returns a client connection to it.
func startGRPC(t *testing.T, lim *slidelimit.Limiter) *grpc.ClientConn {
	t.Helper()
	key := grpclimit.WithKey(grpclimit.KeyByMetadata(apiKeyMetadata))
	gs := grpc.NewServer(
		grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(lim, key)),
		grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(lim, key)),
	)
	gs.RegisterService(&echoDesc, struct{}{})
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
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("grpc.NewClient(%s): %v", ln.Addr(), err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		gs.Stop()
		wg.Wait()
	})
	return conn
}

// grpcAdmitted turns a call's error into whether the interceptor admitted
// it: nil is admitted, ResourceExhausted denied, anything else an error.
func grpcAdmitted(err error) (bool, error) {
	switch status.Code(err) {
	case codes.OK:
		return true, nil
	case codes.ResourceExhausted:
		return false, nil
	}
	return false, err
}

// sayOnce makes one unary call to Say as identity.
func sayOnce(ctx context.Context, conn *grpc.ClientConn, identity string) (bool, error) {
	ctx = metadata.AppendToOutgoingContext(ctx, apiKeyMetadata, identity)
	out := new(wrapperspb.StringValue)
	return grpcAdmitted(conn.Invoke(ctx, methodSay, wrapperspb.String("hi"), out))
}

// chatOnce opens one Chat stream as identity, sends one message and reads
// its echo: a stream the interceptor refused fails on the first receive.
func chatOnce(ctx context.Context, conn *grpc.ClientConn, identity string) (bool, error) {
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(ctx, apiKeyMetadata, identity))
	defer cancel()
	stream, err := conn.NewStream(ctx, chatDesc, methodChat)
	if err != nil {
		return grpcAdmitted(err)
	}
	if err := stream.SendMsg(wrapperspb.String("hi")); err != nil && !errors.Is(err, io.EOF) {
		return false, err
	}
	if err := stream.CloseSend(); err != nil {
		return false, err
	}
	out := new(wrapperspb.StringValue)
	if err := stream.RecvMsg(out); err != nil {
		return grpcAdmitted(err)
	}
	// Drain to the end of the stream, so that it finishes cleanly.
	for stream.RecvMsg(out) == nil {
	}
	return true, nil
}
