package grpclimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/adaptertest"
	"github.com/slidelimit/slidelimit/core/redistest"
	grpclimit "github.com/slidelimit/slidelimit/grpcinterceptor"
	"github.com/slidelimit/slidelimit/grpcinterceptor/grpctest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestUnaryFiveThenExhausted is the scenario: 5 per 10 s gives five
// OKs with exact header fields, then ResourceExhausted whose RetryInfo is
// what is left of the window, with the fields in the trailers only.
func TestUnaryFiveThenExhausted(t *testing.T) {
	clients := []struct {
		name string
		rdb  func(t *testing.T) redis.Scripter
	}{
		{"standalone", func(t *testing.T) redis.Scripter { return redistest.Client(t) }},
		{"cluster", func(t *testing.T) redis.Scripter { return redistest.ClusterClient(t) }},
	}
	for _, tc := range clients {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			lim := newLimiter(t, tc.rdb(t), slidelimit.Per(5, 10*time.Second))
			srv := startServer(t, []grpc.UnaryServerInterceptor{grpclimit.UnaryServerInterceptor(lim)}, nil)
			conn := grpctest.Dial(t, srv.addr)
			ctx := t.Context()

			start := time.Now()
			for i := range 5 {
				r := say(ctx, conn, "hi")
				if r.err != nil {
					t.Fatalf("call %d: Say() = %v, want OK", i+1, r.err)
				}
				want := metadata.MD{
					"ratelimit-policy":      {`"5/10s";q=5;w=10`},
					"ratelimit":             {fmt.Sprintf(`"5/10s";r=%d;t=10`, 4-i)},
					"x-ratelimit-limit":     {"5"},
					"x-ratelimit-remaining": {strconv.Itoa(4 - i)},
					"x-ratelimit-reset":     {"10"},
				}
				if got := rateLimitFields(r.header); !equalMD(got, want) {
					t.Errorf("call %d: header fields = %v, want %v", i+1, got, want)
				}
				if got := rateLimitFields(r.trailer); len(got) != 0 {
					t.Errorf("call %d: trailer fields = %v, want none", i+1, got)
				}
			}

			r := say(ctx, conn, "hi")
			elapsed := time.Since(start)
			if r.code() != codes.ResourceExhausted {
				t.Fatalf("call 6: Say() = %v, want ResourceExhausted", r.err)
			}
			ri, qf := details(r.err)
			if ri == nil || qf == nil {
				t.Fatalf("call 6: details = %v, want RetryInfo and QuotaFailure", status.Convert(r.err).Details())
			}
			// The first call was admitted after start, so what is left of its
			// window when the sixth is denied lies in (10s - elapsed, 10s].
			delay := ri.GetRetryDelay().AsDuration()
			if delay <= 10*time.Second-elapsed || delay > 10*time.Second {
				t.Errorf("RetryInfo.retry_delay = %v, want in (%v, 10s]", delay, 10*time.Second-elapsed)
			}
			if delay%time.Millisecond != 0 {
				t.Errorf("RetryInfo.retry_delay = %v, want whole milliseconds", delay)
			}
			if len(qf.GetViolations()) != 1 || qf.GetViolations()[0].GetSubject() != "5/10s" {
				t.Errorf("QuotaFailure = %v, want one violation of subject 5/10s", qf)
			}
			if msg := status.Convert(r.err).Message(); strings.Contains(msg, "127.0.0.1") || !strings.Contains(msg, "5/10s") {
				t.Errorf("status message = %q, want the policy and not the caller", msg)
			}
			if strings.Contains(qf.String(), "127.0.0.1") {
				t.Errorf("QuotaFailure = %v, names the caller", qf)
			}

			wantTrailer := metadata.MD{
				"ratelimit-policy":      {`"5/10s";q=5;w=10`},
				"ratelimit":             {fmt.Sprintf(`"5/10s";r=0;t=%d`, ceilSeconds(delay))},
				"x-ratelimit-limit":     {"5"},
				"x-ratelimit-remaining": {"0"},
				"x-ratelimit-reset":     {strconv.FormatInt(ceilSeconds(delay), 10)},
				"retry-after":           {strconv.FormatInt(ceilSeconds(delay), 10)},
			}
			if got := rateLimitFields(r.trailer); !equalMD(got, wantTrailer) {
				t.Errorf("trailer fields = %v, want %v", got, wantTrailer)
			}
			if got, want := r.trailer.Get(grpclimit.PushbackKey), strconv.FormatInt(delay.Milliseconds(), 10); len(got) != 1 || got[0] != want {
				t.Errorf("trailer %s = %q, want [%s]", grpclimit.PushbackKey, got, want)
			}
			if len(r.header) != 0 {
				t.Errorf("header of the denial = %v, want none: a trailers-only response", r.header)
			}
			if got := srv.echo.Handled(); got != 5 {
				t.Errorf("handler ran %d times, want 5", got)
			}
		})
	}
}

// TestAllowedCallMetadata checks where the fields of allowed calls go.
func TestAllowedCallMetadata(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	tests := []struct {
		name        string
		opts        []grpclimit.Option
		msg         string
		wantCode    codes.Code
		wantHeader  []string // rate-limit keys in the headers
		wantTrailer []string // rate-limit keys in the trailers
	}{
		{"success", nil, "hi", codes.OK, []string{"ratelimit", "ratelimit-policy", "x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"}, nil},
		{"handler fails", nil, grpctest.FailWord, codes.FailedPrecondition, nil, []string{"ratelimit", "ratelimit-policy", "x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"}},
		{"WithoutHeaders", []grpclimit.Option{grpclimit.WithoutHeaders()}, "hi", codes.OK, nil, nil},
		{"only X-RateLimit", []grpclimit.Option{grpclimit.WithHeaders(slidelimit.Headers{Omit: slidelimit.HeaderRateLimit})}, "hi", codes.OK, []string{"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			lim := newLimiter(t, rdb, slidelimit.PerMinute(10))
			srv := startServer(t, []grpc.UnaryServerInterceptor{grpclimit.UnaryServerInterceptor(lim, tc.opts...)}, nil)
			r := say(t.Context(), grpctest.Dial(t, srv.addr), tc.msg)
			if r.code() != tc.wantCode {
				t.Fatalf("Say(%q) = %v, want %v", tc.msg, r.err, tc.wantCode)
			}
			if got := keysOf(rateLimitFields(r.header)); got != strings.Join(sorted(tc.wantHeader), ",") {
				t.Errorf("header fields = %q, want %q", got, strings.Join(sorted(tc.wantHeader), ","))
			}
			if got := keysOf(rateLimitFields(r.trailer)); got != strings.Join(sorted(tc.wantTrailer), ",") {
				t.Errorf("trailer fields = %q, want %q", got, strings.Join(sorted(tc.wantTrailer), ","))
			}
		})
	}
}

// TestStreamOpenLimit limits streams once each, when they open.
func TestStreamOpenLimit(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, redistest.Client(t), slidelimit.Per(2, 10*time.Second))
	srv := startServer(t, nil, []grpc.StreamServerInterceptor{grpclimit.StreamServerInterceptor(lim)})
	conn := grpctest.Dial(t, srv.addr)

	for i := range 2 {
		cs, err := conn.NewStream(t.Context(), grpctest.ChatDesc, grpctest.MethodChat)
		if err != nil {
			t.Fatalf("stream %d: NewStream: %v", i+1, err)
		}
		for j := range 3 { // messages on an admitted stream are not counted
			if err := cs.SendMsg(wrapperspb.String("hi")); err != nil {
				t.Fatalf("stream %d: SendMsg %d: %v", i+1, j+1, err)
			}
			if err := cs.RecvMsg(new(wrapperspb.StringValue)); err != nil {
				t.Fatalf("stream %d: RecvMsg %d = %v, want a message", i+1, j+1, err)
			}
		}
		hdr, err := cs.Header()
		if err != nil {
			t.Fatalf("stream %d: Header: %v", i+1, err)
		}
		if got, want := hdr.Get("x-ratelimit-remaining"), strconv.Itoa(1-i); len(got) != 1 || got[0] != want {
			t.Errorf("stream %d: header x-ratelimit-remaining = %q, want [%s]", i+1, got, want)
		}
		if err := cs.CloseSend(); err != nil {
			t.Fatalf("stream %d: CloseSend: %v", i+1, err)
		}
		if err := cs.RecvMsg(new(wrapperspb.StringValue)); !errors.Is(err, io.EOF) {
			t.Fatalf("stream %d: end = %v, want io.EOF", i+1, err)
		}
	}

	cs, err := conn.NewStream(t.Context(), grpctest.ChatDesc, grpctest.MethodChat)
	if err != nil {
		t.Fatalf("stream 3: NewStream: %v", err)
	}
	_ = cs.SendMsg(wrapperspb.String("hi")) // may fail once the server has refused the stream
	err = cs.RecvMsg(new(wrapperspb.StringValue))
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("stream 3: RecvMsg = %v, want ResourceExhausted", err)
	}
	if ri, qf := details(err); ri == nil || qf == nil || qf.GetViolations()[0].GetSubject() != "2/10s" {
		t.Errorf("stream 3: details = %v, want RetryInfo and a QuotaFailure of 2/10s", status.Convert(err).Details())
	}
	if got := cs.Trailer().Get(grpclimit.PushbackKey); len(got) != 1 {
		t.Errorf("stream 3: trailer %s = %q, want one value", grpclimit.PushbackKey, got)
	}
	if got := srv.echo.Handled(); got != 2 {
		t.Errorf("handler ran %d times, want 2", got)
	}
}

// TestMessageLimit limits each message a stream receives.
func TestMessageLimit(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	tests := []struct {
		name     string
		opts     []grpclimit.Option
		key      grpclimit.KeyFunc // of the messages
		wantOpen bool              // the stream's own fields in its headers
	}{
		{"messages only", []grpclimit.Option{grpclimit.WithoutStreamOpenLimit()}, nil, false},
		{"messages only, own key", []grpclimit.Option{grpclimit.WithoutStreamOpenLimit()},
			grpclimit.JoinKeys(grpclimit.KeyByMethod, grpclimit.KeyByIP), false},
		{"open and messages", nil, nil, true},
		{"open and messages, own key", nil, grpclimit.KeyByMethod, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			open := newLimiter(t, rdb, slidelimit.PerMinute(10))
			msgs := newLimiter(t, rdb, slidelimit.Per(3, 10*time.Second))
			opts := append(slices.Clone(tc.opts), grpclimit.WithMessageLimit(msgs, tc.key))
			srv := startServer(t, nil, []grpc.StreamServerInterceptor{grpclimit.StreamServerInterceptor(open, opts...)})
			cs, err := grpctest.Dial(t, srv.addr).NewStream(t.Context(), grpctest.ChatDesc, grpctest.MethodChat)
			if err != nil {
				t.Fatalf("NewStream: %v", err)
			}
			for i := range 3 {
				if err := cs.SendMsg(wrapperspb.String("hi")); err != nil {
					t.Fatalf("SendMsg %d: %v", i+1, err)
				}
				if err := cs.RecvMsg(new(wrapperspb.StringValue)); err != nil {
					t.Fatalf("RecvMsg %d = %v, want the echo", i+1, err)
				}
			}
			if err := cs.SendMsg(wrapperspb.String("hi")); err != nil {
				t.Fatalf("SendMsg 4: %v", err)
			}
			err = cs.RecvMsg(new(wrapperspb.StringValue))
			if status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("RecvMsg 4 = %v, want ResourceExhausted", err)
			}
			ri, qf := details(err)
			if ri == nil || qf == nil || qf.GetViolations()[0].GetSubject() != "3/10s" {
				t.Errorf("details = %v, want RetryInfo and a QuotaFailure of 3/10s", status.Convert(err).Details())
			}
			tr := cs.Trailer()
			if got := tr.Get("x-ratelimit-limit"); len(got) != 1 || got[0] != "3" {
				t.Errorf("trailer x-ratelimit-limit = %q, want [3]: the message limit's alone", got)
			}
			if got := tr.Get(grpclimit.PushbackKey); len(got) != 1 {
				t.Errorf("trailer %s = %q, want one value", grpclimit.PushbackKey, got)
			}
			hdr, _ := cs.Header()
			if got := hdr.Get("x-ratelimit-limit"); tc.wantOpen != (len(got) == 1 && got[0] == "10") {
				t.Errorf("header x-ratelimit-limit = %q, want the stream's limit: %v", got, tc.wantOpen)
			}
		})
	}
}

// TestChoosingLimiters covers the skip list, the method map and the
// limiter function.
func TestChoosingLimiters(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	one := func(t *testing.T) *slidelimit.Limiter { return newLimiter(t, rdb, slidelimit.Per(1, 10*time.Second)) }
	many := func(t *testing.T) *slidelimit.Limiter { return newLimiter(t, rdb, slidelimit.PerMinute(100)) }
	tests := []struct {
		name       string
		build      func(t *testing.T) grpc.UnaryServerInterceptor
		wantSay    []codes.Code // three calls of Say
		wantHealth []codes.Code // three health checks
	}{
		{"default limits all", func(t *testing.T) grpc.UnaryServerInterceptor {
			return grpclimit.UnaryServerInterceptor(one(t))
		}, []codes.Code{codes.OK, codes.ResourceExhausted, codes.ResourceExhausted}, []codes.Code{codes.ResourceExhausted, codes.ResourceExhausted, codes.ResourceExhausted}},
		{"skip service", func(t *testing.T) grpc.UnaryServerInterceptor {
			return grpclimit.UnaryServerInterceptor(one(t), grpclimit.WithSkipMethods("grpc.health.v1.Health"))
		}, []codes.Code{codes.OK, codes.ResourceExhausted, codes.ResourceExhausted}, []codes.Code{codes.OK, codes.OK, codes.OK}},
		{"skip method", func(t *testing.T) grpc.UnaryServerInterceptor {
			return grpclimit.UnaryServerInterceptor(one(t), grpclimit.WithSkipMethods("/grpc.health.v1.Health/Check"))
		}, []codes.Code{codes.OK, codes.ResourceExhausted, codes.ResourceExhausted}, []codes.Code{codes.OK, codes.OK, codes.OK}},
		{"skip func", func(t *testing.T) grpc.UnaryServerInterceptor {
			return grpclimit.UnaryServerInterceptor(one(t), grpclimit.WithSkip(func(_ context.Context, c grpclimit.Call) bool {
				return c.FullMethod == grpctest.MethodSay
			}))
		}, []codes.Code{codes.OK, codes.OK, codes.OK}, []codes.Code{codes.OK, codes.ResourceExhausted, codes.ResourceExhausted}},
		{"method map", func(t *testing.T) grpc.UnaryServerInterceptor {
			return grpclimit.UnaryServerInterceptor(many(t), grpclimit.WithMethodLimiters(map[string]*slidelimit.Limiter{grpctest.MethodSay: one(t)}))
		}, []codes.Code{codes.OK, codes.ResourceExhausted, codes.ResourceExhausted}, []codes.Code{codes.OK, codes.OK, codes.OK}},
		{"service map, method wins", func(t *testing.T) grpc.UnaryServerInterceptor {
			return grpclimit.UnaryServerInterceptor(one(t), grpclimit.WithMethodLimiters(map[string]*slidelimit.Limiter{
				"slidelimit.test.Echo/*": one(t),
				grpctest.MethodSay:       many(t),
			}))
		}, []codes.Code{codes.OK, codes.OK, codes.OK}, []codes.Code{codes.OK, codes.ResourceExhausted, codes.ResourceExhausted}},
		{"nil entries", func(t *testing.T) grpc.UnaryServerInterceptor {
			return grpclimit.UnaryServerInterceptor(nil, grpclimit.WithMethodLimiters(map[string]*slidelimit.Limiter{
				"grpc.health.v1.Health": one(t),
				grpctest.MethodSay:      nil,
			}))
		}, []codes.Code{codes.OK, codes.OK, codes.OK}, []codes.Code{codes.OK, codes.ResourceExhausted, codes.ResourceExhausted}},
		{"limiter func", func(t *testing.T) grpc.UnaryServerInterceptor {
			lim := one(t)
			return grpclimit.UnaryServerInterceptor(many(t), grpclimit.WithLimiterFunc(func(_ context.Context, c grpclimit.Call) *slidelimit.Limiter {
				if c.FullMethod == grpctest.MethodSay {
					return nil
				}
				return lim
			}))
		}, []codes.Code{codes.OK, codes.OK, codes.OK}, []codes.Code{codes.OK, codes.ResourceExhausted, codes.ResourceExhausted}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := startServer(t, []grpc.UnaryServerInterceptor{tc.build(t)}, nil)
			conn := grpctest.Dial(t, srv.addr)
			hc := healthpb.NewHealthClient(conn)
			for i := range 3 {
				if got := say(t.Context(), conn, "hi").code(); got != tc.wantSay[i] {
					t.Errorf("Say %d = %v, want %v", i+1, got, tc.wantSay[i])
				}
			}
			for i := range 3 {
				_, err := hc.Check(t.Context(), &healthpb.HealthCheckRequest{})
				if got := status.Code(err); got != tc.wantHealth[i] {
					t.Errorf("Health.Check %d = %v, want %v", i+1, got, tc.wantHealth[i])
				}
			}
		})
	}
}

// TestKeys checks the identity each key gives a real call, and that
// forwarding metadata counts only from trusted proxies.
func TestKeys(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	user := func(ctx context.Context) string {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get("test-user"); len(v) > 0 {
			return v[0]
		}
		return ""
	}
	loopback := netip.MustParsePrefix("127.0.0.0/8")
	parsedProxies, err := slidelimit.ParseTrustedProxies("127.0.0.1", "10.0.0.0/8")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		opts     []grpclimit.Option
		md       []string
		wantCode codes.Code
		wantID   string
	}{
		{"peer IP", nil, nil, codes.OK, "ip:127.0.0.1"},
		{"forwarded from untrusted peer", nil, []string{"x-forwarded-for", "203.0.113.7"}, codes.OK, "ip:127.0.0.1"},
		{"forwarded from trusted proxy", []grpclimit.Option{grpclimit.WithTrustedProxies(loopback)},
			[]string{"x-forwarded-for", "203.0.113.7"}, codes.OK, "ip:203.0.113.7"},
		{"forwarded chain through trusted hops", []grpclimit.Option{grpclimit.WithTrustedProxies(loopback, netip.MustParsePrefix("10.0.0.0/8"))},
			[]string{"x-forwarded-for", "198.51.100.1, 203.0.113.7, 10.1.2.3"}, codes.OK, "ip:203.0.113.7"},
		{"forwarded over several values", []grpclimit.Option{grpclimit.WithTrustedProxies(parsedProxies...)},
			[]string{"x-forwarded-for", "198.51.100.1, 203.0.113.7", "x-forwarded-for", "10.1.2.3"}, codes.OK, "ip:203.0.113.7"},
		{"trusted proxy without metadata", []grpclimit.Option{grpclimit.WithTrustedProxies(loopback)}, nil, codes.OK, "ip:127.0.0.1"},
		{"forwarded garbage from trusted proxy", []grpclimit.Option{grpclimit.WithTrustedProxies(loopback)},
			[]string{"x-forwarded-for", "203.0.113.7, unknown"}, codes.OK, "ip:127.0.0.1"},
		{"forwarded IPv6 grouped", []grpclimit.Option{grpclimit.WithTrustedProxies(loopback)},
			[]string{"x-forwarded-for", "2001:db8:1:2:3:4:5:6"}, codes.OK, "ip:2001:db8:1:2::/64"},
		{"other forwarded key", []grpclimit.Option{grpclimit.WithTrustedProxies(loopback), grpclimit.WithForwardedKey("X-Real-IP")},
			[]string{"x-forwarded-for", "203.0.113.7", "x-real-ip", "203.0.113.8"}, codes.OK, "ip:203.0.113.8"},
		{"metadata", []grpclimit.Option{grpclimit.WithKey(grpclimit.KeyByMetadata("x-api-key"))},
			[]string{"x-api-key", "k1"}, codes.OK, slidelimit.HeaderIdentity("x-api-key", "k1")},
		{"metadata missing", []grpclimit.Option{grpclimit.WithKey(grpclimit.KeyByMetadata("x-api-key"))},
			nil, codes.Unauthenticated, ""},
		{"metadata or IP", []grpclimit.Option{grpclimit.WithKey(grpclimit.FirstKey(grpclimit.KeyByMetadata("x-api-key"), grpclimit.KeyByIP))},
			nil, codes.OK, "ip:127.0.0.1"},
		{"user", []grpclimit.Option{grpclimit.WithKey(grpclimit.KeyByUser(user))},
			[]string{"test-user", "ann"}, codes.OK, "user:ann"},
		{"method and IP", []grpclimit.Option{grpclimit.WithKey(grpclimit.JoinKeys(grpclimit.KeyByMethod, grpclimit.KeyByIP))},
			nil, codes.OK, slidelimit.JoinIdentities("route:"+grpctest.MethodSay, "ip:127.0.0.1")},
		{"custom status", []grpclimit.Option{grpclimit.WithKey(func(context.Context, grpclimit.Call) (string, error) {
			return "", status.Error(codes.PermissionDenied, "no")
		})}, nil, codes.PermissionDenied, ""},
		{"custom failure", []grpclimit.Option{grpclimit.WithKey(func(context.Context, grpclimit.Call) (string, error) {
			return "", errors.New("database down")
		}), grpclimit.WithErrorHook(nil)}, nil, codes.Internal, ""},
		{"custom empty identity", []grpclimit.Option{grpclimit.WithKey(func(context.Context, grpclimit.Call) (string, error) {
			return "", nil
		}), grpclimit.WithErrorHook(nil)}, nil, codes.Internal, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var ids adaptertest.Observed
			lim := newLimiter(t, rdb, slidelimit.PerMinute(10), slidelimit.WithObserver(ids.Observe))
			srv := startServer(t, []grpc.UnaryServerInterceptor{grpclimit.UnaryServerInterceptor(lim, tc.opts...)}, nil)
			r := say(t.Context(), grpctest.Dial(t, srv.addr), "hi", tc.md...)
			if r.code() != tc.wantCode {
				t.Fatalf("Say() = %v, want %v", r.err, tc.wantCode)
			}
			if got := ids.Identities(); tc.wantID != "" && (len(got) == 0 || got[len(got)-1] != tc.wantID) {
				t.Errorf("identities = %q, want the last %q", got, tc.wantID)
			}
			if tc.wantCode == codes.Internal && strings.Contains(status.Convert(r.err).Message(), "database") {
				t.Errorf("status message %q leaks the key's error", status.Convert(r.err).Message())
			}
		})
	}
}

// TestFailurePolicy stops Redis: fail-open lets calls through and reports
// the error, fail-closed refuses them with Unavailable; both recover when
// Redis is back.
func TestFailurePolicy(t *testing.T) {
	t.Parallel()
	rs := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr})
	t.Cleanup(func() { _ = rdb.Close() })

	var openErrs, closedErrs adaptertest.ErrorLog
	openHook := grpclimit.WithErrorHook(func(_ context.Context, _ string, err error) { openErrs.Hook(err) })
	closedHook := grpclimit.WithErrorHook(func(_ context.Context, _ string, err error) { closedErrs.Hook(err) })
	open := newLimiter(t, rdb, slidelimit.PerMinute(100), slidelimit.WithTimeout(200*time.Millisecond))
	closed := newLimiter(t, rdb, slidelimit.PerMinute(100), slidelimit.WithTimeout(200*time.Millisecond),
		slidelimit.WithFailurePolicy(slidelimit.FailClosed))
	openSrv := startServer(t, []grpc.UnaryServerInterceptor{grpclimit.UnaryServerInterceptor(open, openHook)}, nil)
	closedSrv := startServer(t, []grpc.UnaryServerInterceptor{grpclimit.UnaryServerInterceptor(closed, closedHook)},
		[]grpc.StreamServerInterceptor{grpclimit.StreamServerInterceptor(closed, closedHook)})
	openConn, closedConn := grpctest.Dial(t, openSrv.addr), grpctest.Dial(t, closedSrv.addr)
	ctx := t.Context()

	for _, c := range []*grpc.ClientConn{openConn, closedConn} {
		if r := say(ctx, c, "hi"); r.err != nil || len(rateLimitFields(r.header)) == 0 {
			t.Fatalf("with Redis up: Say() = %v with header %v, want OK with fields", r.err, r.header)
		}
	}

	rs.Stop()
	r := say(ctx, openConn, "hi")
	if r.err != nil {
		t.Errorf("fail-open, Redis down: Say() = %v, want OK", r.err)
	}
	if got := rateLimitFields(r.header); len(got) != 0 {
		t.Errorf("fail-open, Redis down: header fields = %v, want none", got)
	}
	if errs := openErrs.Take(); len(errs) != 1 || !errors.Is(errs[0], slidelimit.ErrUnavailable) {
		t.Errorf("fail-open, Redis down: hook got %v, want one error wrapping ErrUnavailable", errs)
	}

	r = say(ctx, closedConn, "hi")
	if r.code() != codes.Unavailable {
		t.Errorf("fail-closed, Redis down: Say() = %v, want Unavailable", r.err)
	}
	if ri, qf := details(r.err); ri == nil || ri.GetRetryDelay().AsDuration() != time.Second || qf != nil {
		t.Errorf("fail-closed, Redis down: details = %v, want RetryInfo of 1s alone", status.Convert(r.err).Details())
	}
	if got := r.trailer.Get("retry-after"); len(got) != 1 || got[0] != "1" {
		t.Errorf("fail-closed, Redis down: trailer retry-after = %q, want [1]", got)
	}
	if got := r.trailer.Get("x-ratelimit-remaining"); len(got) != 0 {
		t.Errorf("fail-closed, Redis down: trailer x-ratelimit-remaining = %q, want none: no quota was checked", got)
	}
	cs, err := closedConn.NewStream(ctx, grpctest.ChatDesc, grpctest.MethodChat)
	if err != nil {
		t.Fatalf("NewStream: %v", err)
	}
	if err := cs.RecvMsg(new(wrapperspb.StringValue)); status.Code(err) != codes.Unavailable {
		t.Errorf("fail-closed, Redis down: stream = %v, want Unavailable", err)
	}
	if errs := closedErrs.Take(); len(errs) != 2 || !errors.Is(errs[0], slidelimit.ErrUnavailable) {
		t.Errorf("fail-closed, Redis down: hook got %v, want two errors wrapping ErrUnavailable", errs)
	}

	rs.Restart()
	eventually(t, 10*time.Second, "fail-closed call admitted after Redis restart", func() bool {
		r := say(ctx, closedConn, "hi")
		return r.err == nil && len(rateLimitFields(r.header)) > 0
	})
	if r := say(ctx, openConn, "hi"); r.err != nil || len(rateLimitFields(r.header)) == 0 {
		t.Errorf("fail-open, Redis back: Say() = %v with header %v, want OK with fields", r.err, r.header)
	}
}

func equalMD(a, b metadata.MD) bool {
	if len(a) != len(b) {
		return false
	}
	for k, va := range a {
		vb := b[k]
		if len(va) != len(vb) {
			return false
		}
		for i := range va {
			if va[i] != vb[i] {
				return false
			}
		}
	}
	return true
}

func keysOf(md metadata.MD) string {
	var ks []string
	for k := range md {
		ks = append(ks, k)
	}
	return strings.Join(sorted(ks), ",")
}

func sorted(s []string) []string {
	return slices.Sorted(slices.Values(s))
}

func ceilSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

// middlewareLimiter has the method set of the Limiter interface of
// go-grpc-middleware v2's ratelimit package, declared here so that the
// module needs no dependency on it.
type middlewareLimiter interface {
	Limit(ctx context.Context) error
}

var _ middlewareLimiter = (*grpclimit.Limiter)(nil)

// limitInterceptor does what a go-grpc-middleware style interceptor does
// with a middlewareLimiter: refuse the call with the error Limit returns.
func limitInterceptor(l middlewareLimiter) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if err := l.Limit(ctx); err != nil {
			return nil, err
		}
		return h(ctx, req)
	}
}

func TestLimiter(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, redistest.Client(t), slidelimit.Per(5, 10*time.Second))
	l := grpclimit.NewLimiter(lim, grpclimit.WithSkipMethods("grpc.health.v1.Health"))
	srv := startServer(t, []grpc.UnaryServerInterceptor{limitInterceptor(l)}, nil)
	conn := grpctest.Dial(t, srv.addr)
	for i := range 5 {
		if r := say(t.Context(), conn, "hi"); r.err != nil {
			t.Fatalf("call %d: Say() = %v, want OK", i+1, r.err)
		}
	}
	r := say(t.Context(), conn, "hi")
	if r.code() != codes.ResourceExhausted {
		t.Fatalf("call 6: Say() = %v, want ResourceExhausted", r.err)
	}
	if ri, qf := details(r.err); ri == nil || qf == nil {
		t.Errorf("call 6: details = %v, want RetryInfo and QuotaFailure", status.Convert(r.err).Details())
	}
	if got := r.trailer.Get(grpclimit.PushbackKey); len(got) != 1 {
		t.Errorf("call 6: trailer %s = %q, want one value", grpclimit.PushbackKey, got)
	}
	if got := rateLimitFields(r.header); len(got) != 0 {
		t.Errorf("call 6: header fields = %v, want none", got)
	}
}

// TestLimiterOutsideServer calls Limit on a context that is no server's:
// no peer, no method. It must not panic, and the default key fails.
func TestLimiterOutsideServer(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, redistest.Client(t), slidelimit.PerMinute(5))
	err := grpclimit.NewLimiter(lim, grpclimit.WithErrorHook(nil)).Limit(t.Context())
	if status.Code(err) != codes.Internal {
		t.Errorf("Limit(background) = %v, want Internal: no peer IP", err)
	}
	err = grpclimit.NewLimiter(lim, grpclimit.WithKey(grpclimit.KeyByMethod)).Limit(t.Context())
	if err != nil {
		t.Errorf("Limit(background) keyed by method = %v, want nil", err)
	}
}

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
			[]string{grpctest.FailWord, grpctest.FailWord, grpctest.FailWord, grpctest.FailWord, grpctest.FailWord, grpctest.FailWord},
			[]codes.Code{codes.FailedPrecondition, codes.FailedPrecondition, codes.FailedPrecondition, codes.FailedPrecondition, codes.FailedPrecondition, codes.ResourceExhausted}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			lim := newLimiter(t, rdb, slidelimit.Per(5, time.Minute))
			srv := startServer(t, []grpc.UnaryServerInterceptor{grpclimit.UnaryServerInterceptor(lim, tt.opts...)}, nil)
			conn := grpctest.Dial(t, srv.addr)
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
			conn := grpctest.Dial(t, srv.addr)
			ended := 0
			for i := range 4 {
				cs, err := conn.NewStream(t.Context(), grpctest.ChatDesc, grpctest.MethodChat)
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

// shadowDenials counts the shadow denials a limiter observes.
type shadowDenials struct{ n atomic.Int64 }

func (s *shadowDenials) observe(_ context.Context, o slidelimit.Observation) {
	if o.Outcome() == slidelimit.OutcomeShadowDenied {
		s.n.Add(1)
	}
}

// TestShadowStreams opens six streams against a limit of five: in shadow
// mode all six run, the sixth without rate-limit fields; without it the
// sixth ends with ResourceExhausted.
func TestShadowStreams(t *testing.T) {
	rdb := redistest.Client(t)
	for _, shadow := range []bool{true, false} {
		var seen shadowDenials
		opts := []slidelimit.Option{slidelimit.WithObserver(seen.observe)}
		if shadow {
			opts = append(opts, slidelimit.WithShadow())
		}
		lim := newLimiter(t, rdb, slidelimit.Per(5, 10*time.Second), opts...)
		srv := startServer(t, nil, []grpc.StreamServerInterceptor{grpclimit.StreamServerInterceptor(lim)})
		conn := grpctest.Dial(t, srv.addr)
		for i := range 6 {
			cs, err := conn.NewStream(t.Context(), grpctest.ChatDesc, grpctest.MethodChat)
			if err != nil {
				t.Fatalf("shadow %v: stream %d: NewStream: %v", shadow, i+1, err)
			}
			_ = cs.SendMsg(wrapperspb.String("hi")) // may fail once the server has refused the stream
			err = cs.RecvMsg(new(wrapperspb.StringValue))
			if i == 5 && !shadow {
				if status.Code(err) != codes.ResourceExhausted {
					t.Fatalf("stream 6 without shadow mode: RecvMsg = %v, want ResourceExhausted", err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("shadow %v: stream %d: RecvMsg = %v, want a message", shadow, i+1, err)
			}
			hdr, err := cs.Header()
			if err != nil {
				t.Fatalf("shadow %v: stream %d: Header: %v", shadow, i+1, err)
			}
			if got, want := len(rateLimitFields(hdr)) > 0, i < 5; got != want {
				t.Errorf("shadow %v: stream %d has rate-limit header fields %v, want %v: %v", shadow, i+1, got, want, hdr)
			}
			if err := cs.CloseSend(); err != nil {
				t.Fatalf("shadow %v: stream %d: CloseSend: %v", shadow, i+1, err)
			}
			if err := cs.RecvMsg(new(wrapperspb.StringValue)); !errors.Is(err, io.EOF) {
				t.Fatalf("shadow %v: stream %d: end = %v, want io.EOF", shadow, i+1, err)
			}
		}
		if got, want := seen.n.Load(), map[bool]int64{true: 1, false: 0}[shadow]; got != want {
			t.Errorf("shadow %v: observer saw %d shadow denials, want %d", shadow, got, want)
		}
		if got, want := srv.echo.Handled(), map[bool]int64{true: 6, false: 5}[shadow]; got != want {
			t.Errorf("shadow %v: handler ran %d times, want %d", shadow, got, want)
		}
	}
}
