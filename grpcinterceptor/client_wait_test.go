package grpclimit_test

import (
	"context"
	"strings"
	"testing"
	"time"

	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
	grpclimit "github.com/slidelimit/slidelimit/grpcinterceptor"
	"github.com/slidelimit/slidelimit/grpcinterceptor/grpctest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestUnaryClientWaitInterceptor waits for the client's limit instead of
// failing, and refuses at once a deadline the limit cannot meet.
func TestUnaryClientWaitInterceptor(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	limit := slidelimit.Per(2, 300*time.Millisecond)
	lim := newLimiter(t, rdb, limit)
	srv := startServer(t, nil, nil)
	conn := grpctest.Dial(t, srv.addr, grpc.WithUnaryInterceptor(grpclimit.UnaryClientWaitInterceptor(lim, grpclimit.WithClientKey(grpclimit.ClientKeyByMethod))))
	for i := range 5 {
		if r := say(t.Context(), conn, "hi"); r.err != nil {
			t.Fatalf("Say %d = %v, want OK after waiting", i+1, r.err)
		}
	}
	if got := srv.attempts.Load(); got != 5 {
		t.Errorf("server saw %d calls, want 5", got)
	}
	// With a full limit of one per 10 s, a call that may wait 100 ms is
	// refused at once.
	full := newLimiter(t, rdb, slidelimit.Per(1, 10*time.Second))
	conn = grpctest.Dial(t, srv.addr, grpc.WithUnaryInterceptor(grpclimit.UnaryClientWaitInterceptor(full)))
	if r := say(t.Context(), conn, "first"); r.err != nil {
		t.Fatalf("Say(first) = %v, want OK", r.err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if r := say(ctx, conn, "hurry"); r.code() != codes.DeadlineExceeded || ctx.Err() != nil {
		t.Errorf("Say(100 ms deadline, limit full) = %v (context %v), want DeadlineExceeded at once", r.err, ctx.Err())
	}
	if got := srv.attempts.Load(); got != 6 {
		t.Errorf("server saw %d calls, want 6: the refused call is never sent", got)
	}
}

// TestClientInterceptorsBlockOnResourceExhausted turn a server's
// ResourceExhausted with RetryInfo into a fleet-wide block of the key.
func TestClientInterceptorsBlockOnResourceExhausted(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	serverLim := newLimiter(t, rdb, slidelimit.Per(1, 10*time.Second))
	srv := startServer(t, []grpc.UnaryServerInterceptor{grpclimit.UnaryServerInterceptor(serverLim)},
		[]grpc.StreamServerInterceptor{grpclimit.StreamServerInterceptor(serverLim)})
	key := "target:" + srv.addr

	tests := []struct {
		name string
		dial func(lim *slidelimit.Limiter) grpc.DialOption
		call func(ctx context.Context, conn *grpc.ClientConn) error
	}{
		{"unary wait", func(lim *slidelimit.Limiter) grpc.DialOption {
			return grpc.WithUnaryInterceptor(grpclimit.UnaryClientWaitInterceptor(lim))
		}, func(ctx context.Context, conn *grpc.ClientConn) error { return say(ctx, conn, "hi").err }},
		{"unary retry with WithBlock", func(lim *slidelimit.Limiter) grpc.DialOption {
			return grpc.WithUnaryInterceptor(grpclimit.UnaryClientInterceptor(grpclimit.WithBlock(lim), grpclimit.WithRetries(0)))
		}, func(ctx context.Context, conn *grpc.ClientConn) error { return say(ctx, conn, "hi").err }},
		{"stream wait", func(lim *slidelimit.Limiter) grpc.DialOption {
			return grpc.WithStreamInterceptor(grpclimit.StreamClientWaitInterceptor(lim))
		}, func(ctx context.Context, conn *grpc.ClientConn) error {
			cs, err := conn.NewStream(ctx, grpctest.ChatDesc, grpctest.MethodChat)
			if err != nil {
				return err
			}
			_ = cs.SendMsg(wrapperspb.String("hi"))
			return cs.RecvMsg(new(wrapperspb.StringValue))
		}},
	}
	// The server's quota of one is used up first, so every call below is
	// answered ResourceExhausted with a RetryInfo of about 10 s.
	if r := say(t.Context(), grpctest.Dial(t, srv.addr), "use the quota"); r.err != nil {
		t.Fatalf("Say = %v, want OK", r.err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lim := newLimiter(t, rdb, slidelimit.PerMinute(100))
			conn := grpctest.Dial(t, srv.addr, tc.dial(lim))
			if err := tc.call(t.Context(), conn); status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("call = %v, want the server's ResourceExhausted", err)
			}
			left, err := lim.Blocked(t.Context(), key)
			if err != nil || left < 5*time.Second {
				t.Fatalf("Blocked(%s) = %v, %v, want the server's retry delay", key, left, err)
			}
			// Another process waiting on the same limit is refused at once
			// by a deadline inside the block, without calling the server.
			before := srv.attempts.Load()
			other := grpctest.Dial(t, srv.addr, grpc.WithUnaryInterceptor(grpclimit.UnaryClientWaitInterceptor(lim)))
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			if r := say(ctx, other, "blocked"); r.code() != codes.DeadlineExceeded || !strings.Contains(r.err.Error(), "deadline") {
				t.Errorf("Say during the block = %v, want DeadlineExceeded", r.err)
			}
			if got := srv.attempts.Load(); got != before {
				t.Errorf("server saw %d calls during the block, want 0", got-before)
			}
		})
	}
}

func TestClientKeys(t *testing.T) {
	if _, err := grpclimit.ClientKeyByTarget(t.Context(), "/m", nil); err == nil {
		t.Error("ClientKeyByTarget(nil connection) = nil error, want one")
	}
	if got, err := grpclimit.ClientKeyByMethod(t.Context(), "/pkg.S/M", nil); err != nil || got != "method:/pkg.S/M" {
		t.Errorf("ClientKeyByMethod = %q, %v, want method:/pkg.S/M", got, err)
	}
}

// TestUnaryClientWaitInterceptorCountsWhenTheServerAnswered: a call the
// server answers 300 ms after its admission has its admission moved to
// when the answer came, so the next call waits a whole window from then.
func TestUnaryClientWaitInterceptorCountsWhenTheServerAnswered(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, redistest.Client(t), slidelimit.Per(1, time.Second), slidelimit.WithDenyCache(0)) // Peek asks Redis
	slow := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		time.Sleep(300 * time.Millisecond)
		return h(ctx, req)
	}
	srv := startServer(t, []grpc.UnaryServerInterceptor{slow}, nil)
	conn := grpctest.Dial(t, srv.addr, grpc.WithUnaryInterceptor(grpclimit.UnaryClientWaitInterceptor(lim, grpclimit.WithClientKey(grpclimit.ClientKeyByMethod))))
	if r := say(t.Context(), conn, "slow"); r.err != nil {
		t.Fatalf("Say = %v, want OK", r.err)
	}
	admissionMovedTo(t, lim, grpctest.MethodSay, time.Now(), "the answer")
}

// TestStreamClientWaitInterceptorCountsWhenTheStreamOpened: a stream that
// opens 300 ms after its admission (here a slow interceptor inside stands
// for a connection being dialed) has its admission moved to when it
// opened, so the next stream waits a whole window from then.
func TestStreamClientWaitInterceptorCountsWhenTheStreamOpened(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, redistest.Client(t), slidelimit.Per(1, time.Second), slidelimit.WithDenyCache(0)) // Peek asks Redis
	dialing := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		time.Sleep(300 * time.Millisecond)
		return streamer(ctx, desc, cc, method, opts...)
	}
	srv := startServer(t, nil, nil)
	conn := grpctest.Dial(t, srv.addr, grpc.WithChainStreamInterceptor(
		grpclimit.StreamClientWaitInterceptor(lim, grpclimit.WithClientKey(grpclimit.ClientKeyByMethod)), dialing))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	if _, err := conn.NewStream(ctx, grpctest.ChatDesc, grpctest.MethodChat); err != nil {
		t.Fatalf("NewStream = %v, want OK", err)
	}
	admissionMovedTo(t, lim, grpctest.MethodChat, time.Now(), "the opening")
}

// admissionMovedTo waits until the one admission of method under lim (one
// per second, keyed by method) has moved to at, 300 ms after it was made:
// the window stays full a whole second from at, not the 700 ms left of an
// unmoved admission. what names at in the failure.
func admissionMovedTo(t *testing.T, lim *slidelimit.Limiter, method string, at time.Time, what string) {
	t.Helper()
	eventually(t, 2*time.Second, "the admission moved to "+what+": a whole window to wait from it", func() bool {
		res, err := lim.Peek(t.Context(), "method:"+method)
		if err != nil {
			t.Fatal(err)
		}
		if res.Remaining != 0 || time.Since(at) > 500*time.Millisecond {
			t.Fatalf("Peek %v after %s = %+v, want the window full", time.Since(at), what, res)
		}
		return res.RetryAfter+time.Since(at) > 900*time.Millisecond // unmoved: about 700 ms
	})
}
