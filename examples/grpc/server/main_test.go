package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
)

// serve runs newServer on a loopback listener and returns a client of it.
func serve(t *testing.T, proxies slidelimit.TrustedProxies) *grpc.ClientConn {
	t.Helper()
	lim, err := slidelimit.New(redistest.Client(t), slidelimit.Per(5, 10*time.Second), slidelimit.WithPrefix(redistest.Prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	srv, _, err := newServer(lim, proxies)
	if err != nil {
		t.Fatalf("newServer: %v", err)
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
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func TestHello(t *testing.T) {
	conn := serve(t, nil)
	want := []codes.Code{codes.OK, codes.OK, codes.OK, codes.OK, codes.OK, codes.ResourceExhausted}
	for i, w := range want {
		var header, trailer metadata.MD
		got, err := callHello(t.Context(), conn, "Ann", grpc.Header(&header), grpc.Trailer(&trailer))
		if status.Code(err) != w {
			t.Fatalf("Hello #%d = %v, want %v", i+1, err, w)
		}
		if w == codes.OK && (got != "Hello, Ann!" || len(header.Get("ratelimit")) != 1) {
			t.Errorf("Hello #%d = %q with header %v, want a greeting and a ratelimit field", i+1, got, header)
		}
		if w != codes.OK && len(trailer.Get("grpc-retry-pushback-ms")) != 1 {
			t.Errorf("Hello #%d trailer = %v, want grpc-retry-pushback-ms", i+1, trailer)
		}
	}
	for i := range 3 {
		if _, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil {
			t.Errorf("Health.Check #%d = %v, want OK: health is not limited", i+1, err)
		}
	}
}

func TestHelloBehindProxy(t *testing.T) {
	conn := serve(t, slidelimit.TrustedProxies{netip.MustParsePrefix("127.0.0.0/8")})
	for i, client := range []string{"198.51.100.1", "198.51.100.2", "198.51.100.3", "198.51.100.4", "198.51.100.5", "198.51.100.6"} {
		var header metadata.MD
		ctx := metadata.AppendToOutgoingContext(t.Context(), "x-forwarded-for", client)
		_, err := callHello(ctx, conn, "Ann", grpc.Header(&header))
		if err != nil || header.Get("x-ratelimit-remaining")[0] != "4" {
			t.Errorf("Hello #%d for %s via proxy = %v remaining %q, want OK remaining 4", i+1, client, err, header.Get("x-ratelimit-remaining"))
		}
	}
}

// TestReflection checks that a generic tool can discover and describe the
// greeter, and that the discovery itself is not limited.
func TestReflection(t *testing.T) {
	conn := serve(t, nil)
	for range 6 {
		stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("reflection ListServices: %v", err)
		}
		var names []string
		for _, s := range resp.GetListServicesResponse().GetService() {
			names = append(names, s.GetName())
		}
		sort.Strings(names)
		if i := sort.SearchStrings(names, greeterServiceName); i == len(names) || names[i] != greeterServiceName {
			t.Fatalf("reflection lists %v, want %s among them", names, greeterServiceName)
		}
		if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: greeterServiceName}}); err != nil {
			t.Fatal(err)
		}
		resp, err = stream.Recv()
		if err != nil || len(resp.GetFileDescriptorResponse().GetFileDescriptorProto()) == 0 {
			t.Fatalf("reflection FileContainingSymbol(%s) = %v, %v, want its file", greeterServiceName, resp, err)
		}
		_ = stream.CloseSend()
		if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
			t.Fatalf("reflection stream end = %v, want io.EOF", err)
		}
	}
}

func TestNewRedis(t *testing.T) {
	t.Setenv("REDIS_CLUSTER_ADDRS", "")
	t.Setenv("REDIS_URL", "redis://:secret@127.0.0.2:6380/3")
	rdb, err := newRedis()
	if err != nil {
		t.Fatal(err)
	}
	c, ok := rdb.(*redis.Client)
	if !ok || c.Options().Addr != "127.0.0.2:6380" || c.Options().DB != 3 || c.Options().Password != "secret" {
		t.Errorf("newRedis() with REDIS_URL = %T, want a client of 127.0.0.2:6380 db 3", rdb)
	}
	_ = rdb.Close()

	t.Setenv("REDIS_URL", "http://nope")
	if _, err := newRedis(); err == nil {
		t.Error("newRedis() with a bad REDIS_URL = nil error, want one")
	}

	t.Setenv("REDIS_CLUSTER_ADDRS", "127.0.0.2:7000,127.0.0.2:7001")
	rdb, err = newRedis()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := rdb.(*redis.ClusterClient); !ok {
		t.Errorf("newRedis() with REDIS_CLUSTER_ADDRS = %T, want *redis.ClusterClient", rdb)
	}
	_ = rdb.Close()
}

func TestRunRejectsBadTrustedProxies(t *testing.T) {
	rdb := redistest.Client(t)
	t.Setenv("REDIS_CLUSTER_ADDRS", "")
	t.Setenv("REDIS_URL", "redis://"+rdb.Options().Addr+"/0")
	t.Setenv("ADDR", "127.0.0.1:0")
	t.Setenv("TRUSTED_PROXIES", "10.0.0.0/8, lb.internal")
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // a run that got past the list would stop at once, with nil
	if err := run(ctx); !errors.Is(err, slidelimit.ErrInvalidOption) {
		t.Errorf("run with TRUSTED_PROXIES=%q = %v, want an error wrapping slidelimit.ErrInvalidOption", os.Getenv("TRUSTED_PROXIES"), err)
	}
}
