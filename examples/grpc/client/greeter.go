// This file is the example's gRPC service, demo.v1.Greeter, with one
// method:
//
//	service Greeter {
//	  rpc Hello(google.protobuf.StringValue) returns (google.protobuf.StringValue);
//	}
//
// It is written by hand, so that the example builds without protoc; in
// your service, the code protoc-gen-go-grpc generates takes its place.
// registerGreeter also registers the service's descriptor, so that the gRPC
// reflection service can describe it to tools such as grpcurl.
//
// The server and the client folders hold the same file, as package main of
// each, so that either folder can be copied alone; keep the two the same
// (make release-check compares them).

package main

import (
	"context"
	"fmt"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Names of the service and its method.
const (
	greeterServiceName = "demo.v1.Greeter"
	// greeterHelloMethod is the full name of Hello, as interceptors see it.
	greeterHelloMethod = "/demo.v1.Greeter/Hello"
)

// greeterServer is what the service does.
type greeterServer interface {
	// Hello greets name.
	Hello(ctx context.Context, name *wrapperspb.StringValue) (*wrapperspb.StringValue, error)
}

// registerGreeter registers srv on s as demo.v1.Greeter.
func registerGreeter(s *grpc.Server, srv greeterServer) error {
	if err := registerGreeterDescriptor(); err != nil {
		return err
	}
	s.RegisterService(&greeterServiceDesc, srv)
	return nil
}

// callHello calls demo.v1.Greeter/Hello on cc.
func callHello(ctx context.Context, cc grpc.ClientConnInterface, name string, opts ...grpc.CallOption) (string, error) {
	out := new(wrapperspb.StringValue)
	if err := cc.Invoke(ctx, greeterHelloMethod, wrapperspb.String(name), out, opts...); err != nil {
		return "", err
	}
	return out.GetValue(), nil
}

var greeterServiceDesc = grpc.ServiceDesc{
	ServiceName: greeterServiceName,
	HandlerType: (*greeterServer)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "Hello", Handler: greeterHelloHandler}},
	Metadata:    "demo/v1/greeter.proto",
}

func greeterHelloHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) { //nolint:revive // the shape of grpc.MethodHandler
	in := new(wrapperspb.StringValue)
	if err := dec(in); err != nil {
		return nil, err
	}
	handle := func(ctx context.Context, req any) (any, error) {
		return srv.(greeterServer).Hello(ctx, req.(*wrapperspb.StringValue))
	}
	if interceptor == nil {
		return handle(ctx, in)
	}
	return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: greeterHelloMethod}, handle)
}

var (
	greeterDescOnce sync.Once
	greeterDescErr  error
)

// registerGreeterDescriptor adds demo/v1/greeter.proto to the global registry,
// where the reflection service looks services up.
func registerGreeterDescriptor() error {
	greeterDescOnce.Do(func() {
		fdp := &descriptorpb.FileDescriptorProto{
			Name:       proto.String("demo/v1/greeter.proto"),
			Package:    proto.String("demo.v1"),
			Dependency: []string{"google/protobuf/wrappers.proto"},
			Syntax:     proto.String("proto3"),
			Service: []*descriptorpb.ServiceDescriptorProto{{
				Name: proto.String("Greeter"),
				Method: []*descriptorpb.MethodDescriptorProto{{
					Name:       proto.String("Hello"),
					InputType:  proto.String(".google.protobuf.StringValue"),
					OutputType: proto.String(".google.protobuf.StringValue"),
				}},
			}},
		}
		fd, err := protodesc.NewFile(fdp, protoregistry.GlobalFiles)
		if err == nil {
			err = protoregistry.GlobalFiles.RegisterFile(fd)
		}
		if err != nil {
			greeterDescErr = fmt.Errorf("greeter: register descriptor: %w", err)
		}
	})
	return greeterDescErr
}
