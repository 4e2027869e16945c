package integration

import (
	"context"
	"errors"
	"io"
	"testing"

	slidelimit "github.com/slidelimit/slidelimit/core"
	grpclimit "github.com/slidelimit/slidelimit/grpcinterceptor"
	"github.com/slidelimit/slidelimit/grpcinterceptor/grpctest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// apiKeyMetadata is the metadata key the gRPC servers key calls by.
const apiKeyMetadata = "x-api-key"

// startGRPC serves the echo service of package grpctest on a loopback
// port behind grpclimit's unary and stream interceptors, keyed by the
// x-api-key metadata, and returns a client connection to it.
func startGRPC(t *testing.T, lim *slidelimit.Limiter) *grpc.ClientConn {
	t.Helper()
	key := grpclimit.WithKey(grpclimit.KeyByMetadata(apiKeyMetadata))
	gs := grpc.NewServer(
		grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(lim, key)),
		grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(lim, key)),
	)
	new(grpctest.Echo).Register(gs)
	return grpctest.Dial(t, grpctest.Serve(t, gs))
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
	return grpcAdmitted(conn.Invoke(ctx, grpctest.MethodSay, wrapperspb.String("hi"), out))
}

// chatOnce opens one Chat stream as identity, sends one message and reads
// its echo: a stream the interceptor refused fails on the first receive.
func chatOnce(ctx context.Context, conn *grpc.ClientConn, identity string) (bool, error) {
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(ctx, apiKeyMetadata, identity))
	defer cancel()
	stream, err := conn.NewStream(ctx, grpctest.ChatDesc, grpctest.MethodChat)
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
