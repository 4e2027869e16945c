package grpclimit_test

import (
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
	grpclimit "github.com/slidelimit/slidelimit/grpcinterceptor"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestCostAndRefund checks what the conformance suite does not: the
// refunds by a chosen code, and of streams.
func TestCostAndRefund(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	tests := []struct {
		name string
		opts []grpclimit.Option
		msgs []string // Say, in order
		want []codes.Code
	}{
		{"failed code chosen", []grpclimit.Option{grpclimit.WithRefundFailed(), grpclimit.WithFailedCode(func(c codes.Code) bool { return c == codes.Unavailable })},
			[]string{failWord, failWord, failWord, failWord, failWord, failWord},
			[]codes.Code{codes.FailedPrecondition, codes.FailedPrecondition, codes.FailedPrecondition, codes.FailedPrecondition, codes.FailedPrecondition, codes.ResourceExhausted}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			lim := newLimiter(t, rdb, slidelimit.Per(5, time.Minute))
			srv := startServer(t, []grpc.UnaryServerInterceptor{grpclimit.UnaryServerInterceptor(lim, tt.opts...)}, nil)
			conn := dial(t, srv.addr)
			for i, msg := range tt.msgs {
				if got := say(t.Context(), conn, msg).code(); got != tt.want[i] {
					t.Fatalf("call %d Say(%q) = %v, want %v", i+1, msg, got, tt.want[i])
				}
			}
		})
	}

	// Four streams that end cleanly under a limit of 2: with
	// WithRefundSuccessful each gives its opening back, without it the
	// third is refused.
	for _, refund := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream refund %v", refund), func(t *testing.T) {
			t.Parallel()
			var opts []grpclimit.Option
			if refund {
				opts = append(opts, grpclimit.WithRefundSuccessful())
			}
			lim := newLimiter(t, rdb, slidelimit.Per(2, time.Minute))
			srv := startServer(t, nil, []grpc.StreamServerInterceptor{grpclimit.StreamServerInterceptor(lim, opts...)})
			conn := dial(t, srv.addr)
			ended := 0
			for i := range 4 {
				cs, err := conn.NewStream(t.Context(), chatDesc, methodChat)
				if err != nil {
					t.Fatalf("stream %d: NewStream() = %v", i+1, err)
				}
				if err := cs.CloseSend(); err != nil {
					t.Fatalf("stream %d: CloseSend() = %v", i+1, err)
				}
				switch err := cs.RecvMsg(new(wrapperspb.StringValue)); {
				case errors.Is(err, io.EOF):
					ended++
				case status.Code(err) != codes.ResourceExhausted:
					t.Fatalf("stream %d: end = %v, want io.EOF or ResourceExhausted", i+1, err)
				}
			}
			if want := map[bool]int{false: 2, true: 4}[refund]; ended != want {
				t.Errorf("streams that ended cleanly = %d, want %d", ended, want)
			}
		})
	}
}
