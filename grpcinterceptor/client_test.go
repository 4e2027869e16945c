package grpclimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
	grpclimit "github.com/slidelimit/slidelimit/grpcinterceptor"
	"github.com/slidelimit/slidelimit/grpcinterceptor/grpctest"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// retryConfig is a service config whose retry policy retries
// RESOURCE_EXHAUSTED. Its own backoff is far shorter than the 300 ms the
// server asks for, so only a client that honours the pushback succeeds.
const retryConfig = `{
  "methodConfig": [{
    "name": [{"service": "slidelimit.test.Echo"}],
    "retryPolicy": {
      "maxAttempts": 2,
      "initialBackoff": "0.001s",
      "maxBackoff": "0.005s",
      "backoffMultiplier": 1.0,
      "retryableStatusCodes": ["RESOURCE_EXHAUSTED"]
    }
  }]
}`

// TestServiceConfigRetry shows that a client with a retry policy retries a
// denial after the server's pushback, and succeeds; and that it cannot
// when a header was sent before the denial, which is why denials are
// trailers-only.
func TestServiceConfigRetry(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	// sendHeader commits each call by sending its headers at once.
	sendHeader := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if err := grpc.SendHeader(ctx, metadata.Pairs("early", "1")); err != nil {
			return nil, err
		}
		return h(ctx, req)
	}
	tests := []struct {
		name         string
		before       []grpc.UnaryServerInterceptor
		wantCode     codes.Code
		wantAttempts int64
	}{
		{"trailers-only denial is retried", nil, codes.OK, 3},
		{"committed denial is not", []grpc.UnaryServerInterceptor{sendHeader}, codes.ResourceExhausted, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			lim := newLimiter(t, rdb, slidelimit.Per(1, 300*time.Millisecond))
			srv := startServer(t, append(tc.before, grpclimit.UnaryServerInterceptor(lim)), nil)
			conn := grpctest.Dial(t, srv.addr, grpc.WithDefaultServiceConfig(retryConfig))
			sayTwice(t.Context(), t, srv, conn, tc.wantCode, tc.wantAttempts)
		})
	}
}

// TestUnaryClientInterceptor retries denials after their RetryInfo delay.
func TestUnaryClientInterceptor(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	tests := []struct {
		name         string
		window       time.Duration
		opts         []grpclimit.ClientOption
		timeout      time.Duration // 0: no deadline
		wantCode     codes.Code
		wantAttempts int64
	}{
		{"waits and succeeds", 300 * time.Millisecond, nil, 0, codes.OK, 3},
		{"within the deadline", 300 * time.Millisecond, nil, 5 * time.Second, codes.OK, 3},
		{"retries off", 300 * time.Millisecond, []grpclimit.ClientOption{grpclimit.WithRetries(0)}, 0, codes.ResourceExhausted, 2},
		{"delay past the deadline", 10 * time.Second, nil, 2 * time.Second, codes.ResourceExhausted, 2},
		{"delay past the maximum", 10 * time.Second, []grpclimit.ClientOption{grpclimit.WithMaxRetryDelay(time.Second)}, 0, codes.ResourceExhausted, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			lim := newLimiter(t, rdb, slidelimit.Per(1, tc.window))
			srv := startServer(t, []grpc.UnaryServerInterceptor{grpclimit.UnaryServerInterceptor(lim)}, nil)
			conn := grpctest.Dial(t, srv.addr, grpc.WithUnaryInterceptor(grpclimit.UnaryClientInterceptor(tc.opts...)))
			ctx := t.Context()
			if tc.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.timeout)
				defer cancel()
			}
			sayTwice(ctx, t, srv, conn, tc.wantCode, tc.wantAttempts)
		})
	}
}

// sayTwice calls Say on conn twice, against a limit of one call: the first
// call must succeed, the second end with wantCode, and srv must have seen
// wantAttempts attempts in all.
func sayTwice(ctx context.Context, t *testing.T, srv *server, conn *grpc.ClientConn, wantCode codes.Code, wantAttempts int64) {
	t.Helper()
	if r := say(ctx, conn, "first"); r.err != nil {
		t.Fatalf("Say(first) = %v, want OK", r.err)
	}
	if r := say(ctx, conn, "second"); r.code() != wantCode {
		t.Errorf("Say(second) = %v, want %v", r.err, wantCode)
	}
	if got := srv.attempts.Load(); got != wantAttempts {
		t.Errorf("server saw %d attempts, want %d", got, wantAttempts)
	}
}

// TestUnaryClientInterceptorContextEnds stops waiting when the context ends.
func TestUnaryClientInterceptorContextEnds(t *testing.T) {
	t.Parallel()
	denied := status.New(codes.ResourceExhausted, "slow down")
	denied, err := denied.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	invoker := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
		return denied.Err()
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- grpclimit.UnaryClientInterceptor(grpclimit.WithMaxRetryDelay(2*time.Hour))(ctx, "/m", nil, nil, nil, invoker)
	}()
	cancel()
	if err := <-done; status.Code(err) != codes.Canceled {
		t.Errorf("interceptor = %v, want Canceled", err)
	}
}

func TestRetryDelay(t *testing.T) {
	t.Parallel()
	with := func(code codes.Code, d *durationpb.Duration) error {
		s, err := status.New(code, "x").WithDetails(&errdetails.RetryInfo{RetryDelay: d})
		if err != nil {
			t.Fatal(err)
		}
		return s.Err()
	}
	tests := []struct {
		name   string
		err    error
		want   time.Duration
		wantOK bool
	}{
		{"nil", nil, 0, false},
		{"plain error", errors.New("x"), 0, false},
		{"status without details", status.Error(codes.ResourceExhausted, "x"), 0, false},
		{"RetryInfo", with(codes.ResourceExhausted, durationpb.New(1500*time.Millisecond)), 1500 * time.Millisecond, true},
		{"RetryInfo on Unavailable", with(codes.Unavailable, durationpb.New(time.Second)), time.Second, true},
		{"RetryInfo without delay", with(codes.ResourceExhausted, nil), 0, false},
		{"invalid delay", with(codes.ResourceExhausted, &durationpb.Duration{Seconds: 1, Nanos: -1}), 0, false},
		{"negative delay", with(codes.ResourceExhausted, durationpb.New(-time.Second)), 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := grpclimit.RetryDelay(tc.err)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("RetryDelay(%v) = %v, %v, want %v, %v", tc.err, got, ok, tc.want, tc.wantOK)
			}
		})
	}
}
