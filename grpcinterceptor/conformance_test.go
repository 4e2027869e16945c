package grpclimit_test

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/adaptertest"
	grpclimit "github.com/slidelimit/slidelimit/grpcinterceptor"
	"github.com/slidelimit/slidelimit/grpcinterceptor/grpctest"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The conformance service: one unary method per path the suite sends to,
// each answering with the code of the status the request asks for.
const (
	suiteService = "adaptertest.Suite"
	peerKey      = "x-adaptertest-peer"
)

// codeHTTP maps the codes the interceptors and the handler answer with to
// HTTP statuses, as the suite reads them.
var codeHTTP = map[codes.Code]int{
	codes.OK: http.StatusOK, codes.ResourceExhausted: http.StatusTooManyRequests,
	codes.Unavailable: http.StatusServiceUnavailable, codes.Internal: http.StatusInternalServerError,
	codes.Unauthenticated: http.StatusUnauthorized, codes.FailedPrecondition: http.StatusBadRequest,
}

// TestConformance runs the suite every adapter passes, over a real gRPC
// connection; the request's peer is set by an outer interceptor, as a
// transport would.
func TestConformance(t *testing.T) {
	adaptertest.Run(t, func(t *testing.T, s adaptertest.Settings) adaptertest.Server {
		key := grpclimit.KeyByIPPrefix(s.ClientIP.IPv6Prefix)
		if s.KeyHeader != "" {
			key = grpclimit.KeyByMetadata(s.KeyHeader)
		}
		path := func(call grpclimit.Call) string { return strings.TrimPrefix(call.FullMethod, "/"+suiteService) }
		opts := []grpclimit.Option{
			grpclimit.WithKey(key),
			grpclimit.WithTrustedProxies(s.ClientIP.TrustedProxies...),
			grpclimit.WithForwardedKey(s.ClientIP.Header),
			grpclimit.WithHeaders(s.Headers),
			grpclimit.WithLimiterFunc(func(_ context.Context, call grpclimit.Call) *slidelimit.Limiter { return s.LimiterFor(path(call)) }),
			grpclimit.WithSkip(func(_ context.Context, call grpclimit.Call) bool { return path(call) == s.SkipPath }),
		}
		if s.CostHeader != "" {
			opts = append(opts, grpclimit.WithCost(func(ctx context.Context, _ grpclimit.Call) int {
				n, _ := strconv.Atoi(strings.Join(metadata.ValueFromIncomingContext(ctx, s.CostHeader), ""))
				return n
			}))
		}
		if s.PlanHeader != "" {
			opts = append(opts, grpclimit.WithLimits(func(ctx context.Context, _ grpclimit.Call) []slidelimit.Limit {
				return adaptertest.Plan(strings.Join(metadata.ValueFromIncomingContext(ctx, s.PlanHeader), ""))
			}))
		}
		if s.RefundFailed {
			opts = append(opts, grpclimit.WithRefundFailed())
		}
		if s.RefundSuccessful {
			opts = append(opts, grpclimit.WithRefundSuccessful())
		}
		if s.Hook != nil {
			opts = append(opts, grpclimit.WithErrorHook(func(_ context.Context, _ string, err error) { s.Hook(err) }))
		}
		conn := grpctest.Dial(t, startSuiteServer(t, grpclimit.UnaryServerInterceptor(s.Limiter, opts...)))
		return func(t testing.TB, r adaptertest.Request) adaptertest.Response {
			md := metadata.MD{peerKey: {r.Peer.String()}}
			for name, values := range r.Header {
				for _, v := range values {
					md.Append(name, printable(v))
				}
			}
			var header, trailer metadata.MD
			err := conn.Invoke(metadata.NewOutgoingContext(t.Context(), md), "/"+suiteService+r.Path,
				wrapperspb.String(strconv.Itoa(r.Status)), new(wrapperspb.StringValue), grpc.Header(&header), grpc.Trailer(&trailer))
			res := adaptertest.Response{Status: http.StatusInternalServerError, Header: http.Header{}}
			if s, ok := codeHTTP[status.Code(err)]; ok {
				res.Status = s
			}
			for _, md := range []metadata.MD{header, trailer} {
				for k, vs := range md {
					for _, v := range vs {
						res.Header.Add(k, v)
					}
				}
			}
			for _, d := range status.Convert(err).Details() {
				if ri, ok := d.(*errdetails.RetryInfo); ok {
					res.RetryAfter = ri.GetRetryDelay().AsDuration()
				}
			}
			return res
		}
	})
}

// printable returns v as gRPC metadata may carry it: printable ASCII,
// anything else escaped, so that distinct values stay distinct.
func printable(v string) string {
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] > 0x7e {
			return url.QueryEscape(v)
		}
	}
	return v
}

// startSuiteServer serves the conformance service on 127.0.0.1 behind
// limit, with the peer taken from the request's peerKey metadata.
func startSuiteServer(t *testing.T, limit grpc.UnaryServerInterceptor) string {
	t.Helper()
	setPeer := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if v := metadata.ValueFromIncomingContext(ctx, peerKey); len(v) == 1 {
			if ip := net.ParseIP(v[0]); ip != nil {
				ctx = peer.NewContext(ctx, &peer.Peer{Addr: &net.TCPAddr{IP: ip, Port: 40000}})
			}
		}
		return h(ctx, req)
	}
	answer := func(_ any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		method, _ := grpc.Method(ctx)
		return interceptor(ctx, in, &grpc.UnaryServerInfo{FullMethod: method}, func(_ context.Context, req any) (any, error) {
			switch s, _ := strconv.Atoi(req.(*wrapperspb.StringValue).GetValue()); {
			case s >= http.StatusInternalServerError:
				return nil, status.Error(codes.Internal, "asked to fail")
			case s >= http.StatusBadRequest:
				return nil, status.Error(codes.FailedPrecondition, "asked to fail")
			}
			return req, nil
		})
	}
	desc := grpc.ServiceDesc{ServiceName: suiteService, HandlerType: (*any)(nil)}
	for _, m := range []string{"a", "b", "healthz"} {
		desc.Methods = append(desc.Methods, grpc.MethodDesc{MethodName: m, Handler: answer})
	}
	gs := grpc.NewServer(grpc.ChainUnaryInterceptor(setPeer, limit))
	gs.RegisterService(&desc, struct{}{})
	return grpctest.Serve(t, gs)
}
