// Package grpctest serves a small gRPC service for tests of gRPC
// interceptors, such as those of package grpclimit. The service,
// slidelimit.test.Echo, is written by hand instead of generated, so a test
// needs no .proto file and no generated code: its unary method Say
// answers the google.protobuf.StringValue it receives, and its
// bidirectional stream Chat echoes each message back.
//
// Register an Echo on a grpc.Server behind the interceptors under test,
// serve it on loopback with Serve and connect to it with Dial, call
// MethodSay with grpc.ClientConn.Invoke and MethodChat with
// grpc.ClientConn.NewStream and ChatDesc, and read Echo.Handled to learn
// how many calls got past the interceptors.
package grpctest
