package grpclimit_test

import (
	"context"
	"errors"
	"io"
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
	suiteService  = "adaptertest.Suite"
	streamService = "adaptertest.StreamSuite" // the same methods, each a server stream
	peerKey       = "x-adaptertest-peer"
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
		path := func(call grpclimit.Call) string {
			_, method, _ := strings.Cut(call.FullMethod[1:], "/")
			return "/" + method
		}
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
		if s.Tree != nil {
			opts = append(opts, grpclimit.WithTree(func(ctx context.Context, _ grpclimit.Call) (string, []slidelimit.Level, error) {
				return s.Tree(strings.Join(metadata.ValueFromIncomingContext(ctx, adaptertest.TreeHeader), ""))
			}))
		}
		if s.RefundFailed {
			opts = append(opts, grpclimit.WithRefundFailed())
		}
		if s.RefundSuccessful {
			opts = append(opts, grpclimit.WithRefundSuccessful())
		}
		if s.Settle {
			opts = append(opts, grpclimit.WithSettle(func(_ context.Context, _ grpclimit.Call, r grpclimit.Response) (int, bool) {
				n, err := strconv.Atoi(strings.Join(r.Trailer.Get(adaptertest.UsageKey), ""))
				return n, err == nil
			}))
		}
		if s.Hook != nil {
			opts = append(opts, grpclimit.WithErrorHook(func(_ context.Context, _ string, err error) { s.Hook(err) }))
		}
		conn := grpctest.Dial(t, startSuiteServer(t, grpclimit.UnaryServerInterceptor(s.Limiter, opts...),
			grpclimit.StreamServerInterceptor(s.Limiter, opts...)))
		return func(t testing.TB, r adaptertest.Request) adaptertest.Response {
			md := metadata.MD{peerKey: {r.Peer.String()}}
			for name, values := range r.HTTPRequest(t).Header { // r.Header, and how to answer
				for _, v := range values {
					md.Append(name, printable(v))
				}
			}
			var header, trailer metadata.MD
			ctx := metadata.NewOutgoingContext(t.Context(), md)
			in := wrapperspb.String(strconv.Itoa(r.Status))
			var err error
			if r.Stream {
				err = stream(ctx, conn, "/"+streamService+r.Path, in, grpc.Header(&header), grpc.Trailer(&trailer))
			} else {
				err = conn.Invoke(ctx, "/"+suiteService+r.Path, in, new(wrapperspb.StringValue), grpc.Header(&header), grpc.Trailer(&trailer))
			}
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

// stream calls the server stream method with in, and reads its messages
// to the end.
func stream(ctx context.Context, conn *grpc.ClientConn, method string, in any, opts ...grpc.CallOption) error {
	cs, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, method, opts...)
	if err != nil {
		return err
	}
	if err := cs.SendMsg(in); err != nil {
		return err
	}
	if err := cs.CloseSend(); err != nil {
		return err
	}
	for {
		if err := cs.RecvMsg(new(wrapperspb.StringValue)); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
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
// the limits, with the peer taken from the request's peerKey metadata:
// each method unary in suiteService, a server stream in streamService.
func startSuiteServer(t *testing.T, limit grpc.UnaryServerInterceptor, limitStream grpc.StreamServerInterceptor) string {
	t.Helper()
	withPeer := func(ctx context.Context) context.Context {
		if v := metadata.ValueFromIncomingContext(ctx, peerKey); len(v) == 1 {
			if ip := net.ParseIP(v[0]); ip != nil {
				ctx = peer.NewContext(ctx, &peer.Peer{Addr: &net.TCPAddr{IP: ip, Port: 40000}})
			}
		}
		return ctx
	}
	setPeer := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return h(withPeer(ctx), req)
	}
	setStreamPeer := func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		return h(srv, &peerStream{ss, withPeer(ss.Context())})
	}
	answer := func(_ any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		method, _ := grpc.Method(ctx)
		return interceptor(ctx, in, &grpc.UnaryServerInfo{FullMethod: method}, func(ctx context.Context, req any) (any, error) {
			a := answerTo(ctx)
			a.Wait(ctx)
			if a.Usage > 0 {
				_ = grpc.SetTrailer(ctx, metadata.Pairs(adaptertest.UsageKey, strconv.Itoa(a.Usage)))
			}
			if err := codeOf(req.(*wrapperspb.StringValue)); err != nil {
				return nil, err
			}
			return req, nil
		})
	}
	answerStream := func(_ any, ss grpc.ServerStream) error {
		in := new(wrapperspb.StringValue)
		if err := ss.RecvMsg(in); err != nil {
			return err
		}
		a := answerTo(ss.Context())
		for i, chunk := range a.Body() {
			if err := ss.SendMsg(wrapperspb.String(string(chunk))); err != nil {
				return err
			}
			if i == 0 {
				a.Wait(ss.Context())
			}
		}
		if a.Usage > 0 {
			ss.SetTrailer(metadata.Pairs(adaptertest.UsageKey, strconv.Itoa(a.Usage)))
		}
		return codeOf(in)
	}
	desc := grpc.ServiceDesc{ServiceName: suiteService, HandlerType: (*any)(nil)}
	streams := grpc.ServiceDesc{ServiceName: streamService, HandlerType: (*any)(nil)}
	for _, m := range []string{"a", "b", "healthz"} {
		desc.Methods = append(desc.Methods, grpc.MethodDesc{MethodName: m, Handler: answer})
		streams.Streams = append(streams.Streams, grpc.StreamDesc{StreamName: m, Handler: answerStream, ServerStreams: true})
	}
	gs := grpc.NewServer(grpc.ChainUnaryInterceptor(setPeer, limit), grpc.ChainStreamInterceptor(setStreamPeer, limitStream))
	gs.RegisterService(&desc, struct{}{})
	gs.RegisterService(&streams, struct{}{})
	return grpctest.Serve(t, gs)
}

// peerStream is a stream whose context carries the peer.
type peerStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *peerStream) Context() context.Context { return s.ctx }

// answerTo returns how to answer the call of ctx, from its metadata.
func answerTo(ctx context.Context) adaptertest.Answer {
	md, _ := metadata.FromIncomingContext(ctx)
	h := http.Header{}
	for k, vs := range md {
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	return adaptertest.AnswerTo(h)
}

// codeOf returns the status of the HTTP status in, as the suite asks.
func codeOf(in *wrapperspb.StringValue) error {
	switch s, _ := strconv.Atoi(in.GetValue()); {
	case s >= http.StatusInternalServerError:
		return status.Error(codes.Internal, "asked to fail")
	case s >= http.StatusBadRequest:
		return status.Error(codes.FailedPrecondition, "asked to fail")
	}
	return nil
}
