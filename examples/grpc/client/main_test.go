package main

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
	grpclimit "github.com/slidelimit/slidelimit/grpcinterceptor"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

type hello struct{}

func (hello) Hello(context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	return wrapperspb.String("hi"), nil
}

// TestRun runs the client against a greeter limited as the example
// server's is, and checks what it prints.
func TestRun(t *testing.T) {
	lim, err := slidelimit.New(redistest.Client(t), slidelimit.Per(5, 10*time.Second), slidelimit.WithPrefix(redistest.Prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(lim)))
	if err := registerGreeter(srv, hello{}); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})

	var out strings.Builder
	if err := run(t.Context(), ln.Addr().String(), 6, &out); err != nil {
		t.Fatalf("run: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := []string{
		"call 1: OK (remaining 4)",
		"call 2: OK (remaining 3)",
		"call 3: OK (remaining 2)",
		"call 4: OK (remaining 1)",
		"call 5: OK (remaining 0)",
		"call 6: ResourceExhausted (policy 5/10s, retry in ",
	}
	if len(lines) != len(want) {
		t.Fatalf("run printed %q, want %d lines", out.String(), len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("line %d = %q, want it to start %q", i+1, lines[i], w)
		}
	}
}
