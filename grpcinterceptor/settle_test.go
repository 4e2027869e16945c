package grpclimit_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
	grpclimit "github.com/slidelimit/slidelimit/grpcinterceptor"
	"github.com/slidelimit/slidelimit/grpcinterceptor/grpctest"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestSettleFromTheResponseMessage: a unary call is settled to what its
// response message says, a stream to what its last message says once its
// handler returns, and both give their place in flight back.
func TestSettleFromTheResponseMessage(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, redistest.Client(t), slidelimit.PerMinute(100), slidelimit.WithLimits(slidelimit.InFlight(1, time.Minute)))
	opts := []grpclimit.Option{
		grpclimit.WithCost(func(context.Context, grpclimit.Call) int { return 20 }),
		grpclimit.WithSettle(func(_ context.Context, _ grpclimit.Call, r grpclimit.Response) (int, bool) {
			m, _ := r.Message.(*wrapperspb.StringValue)
			n, err := strconv.Atoi(m.GetValue())
			return n, err == nil
		}),
	}
	srv := startServer(t, []grpc.UnaryServerInterceptor{grpclimit.UnaryServerInterceptor(lim, opts...)},
		[]grpc.StreamServerInterceptor{grpclimit.StreamServerInterceptor(lim, opts...)})
	conn := grpctest.Dial(t, srv.addr)
	ctx := t.Context()
	remaining := func() [2]int {
		t.Helper()
		res, err := lim.Peek(ctx, slidelimit.IPIdentity("127.0.0.1", 0))
		if err != nil {
			t.Fatal(err)
		}
		return [2]int{res.Statuses[0].Remaining, res.Statuses[1].Remaining}
	}

	if r := say(ctx, conn, "3"); r.err != nil {
		t.Fatalf("Say(3) = %v", r.err)
	}
	if got := remaining(); got != [2]int{97, 1} {
		t.Errorf("after a call whose response says 3: remaining %v, want [97 1]", got)
	}

	cs, err := conn.NewStream(ctx, grpctest.ChatDesc, grpctest.MethodChat)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"1", "2", "9"} {
		if err := cs.SendMsg(wrapperspb.String(m)); err != nil {
			t.Fatal(err)
		}
		if err := cs.RecvMsg(new(wrapperspb.StringValue)); err != nil {
			t.Fatal(err)
		}
	}
	if got := remaining(); got != [2]int{77, 0} {
		t.Errorf("while the stream is open: remaining %v, want [77 0] (its estimate, its place held)", got)
	}
	if err := cs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if err := cs.RecvMsg(new(wrapperspb.StringValue)); err == nil {
		t.Fatal("RecvMsg after the last message: nil, want io.EOF")
	}
	eventually(t, 5*time.Second, "the stream settled to its last message, 9, and its place given back", func() bool {
		return remaining() == [2]int{88, 1}
	})
}
