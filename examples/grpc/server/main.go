// Command server is a gRPC server whose demo.v1.Greeter/Hello is limited to
// 5 calls per 10 seconds per client IP, one limit shared through Redis by
// every instance of the server. It also serves the health service and the
// reflection service, neither limited, so that generic tools can call it:
//
//	grpcurl -plaintext -d '"Ann"' localhost:50051 demo.v1.Greeter/Hello
//
// Environment:
//
//	ADDR                 listen address (default ":50051")
//	REDIS_URL            Redis to use (default "redis://127.0.0.1:6379/0")
//	REDIS_CLUSTER_ADDRS  host:port,host:port,... selects Redis Cluster instead
//	TRUSTED_PROXIES      CIDRs or IPs of proxies whose x-forwarded-for to
//	                     believe, comma-separated (default: none)
//
// It stops gracefully on SIGINT or SIGTERM.
package main

import (
	"context"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	grpclimit "github.com/slidelimit/slidelimit/grpcinterceptor"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	if err != nil {
		log.Fatal(err)
	}
}

// run serves until ctx is done, then shuts down gracefully.
func run(ctx context.Context) error {
	rdb, err := newRedis()
	if err != nil {
		return err
	}
	defer rdb.Close()
	pingCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	if err := rdb.Ping(pingCtx).Err(); err != nil {
		log.Printf("redis does not answer yet (calls pass unlimited until it does): %v", err)
	}
	cancel()

	lim, err := slidelimit.New(rdb, slidelimit.Per(5, 10*time.Second))
	if err != nil {
		return err
	}
	proxies, err := slidelimit.ParseTrustedProxies(strings.Split(os.Getenv("TRUSTED_PROXIES"), ",")...)
	if err != nil {
		return fmt.Errorf("TRUSTED_PROXIES: %w", err)
	}
	srv, healthSrv, err := newServer(lim, proxies)
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", envOr("ADDR", ":50051"))
	if err != nil {
		return err
	}
	log.Printf("listening on %s", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()

	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Print("shutting down")
	healthSrv.Shutdown() // health checks now answer NOT_SERVING
	stopped := make(chan struct{})
	go func() {
		srv.GracefulStop() // waits for the calls in flight
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		srv.Stop()
	}
	return <-errc
}

// newServer returns a gRPC server with the greeter limited by lim per
// client IP, and the health and reflection services exempt from it.
func newServer(lim *slidelimit.Limiter, trustedProxies slidelimit.TrustedProxies) (*grpc.Server, *health.Server, error) {
	opts := []grpclimit.Option{
		grpclimit.WithSkipMethods(
			"grpc.health.v1.Health",
			"grpc.reflection.v1.ServerReflection",
			"grpc.reflection.v1alpha.ServerReflection",
		),
		grpclimit.WithTrustedProxies(trustedProxies...),
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(lim, opts...)),
		grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(lim, opts...)),
	)
	if err := registerGreeter(srv, hello{}); err != nil {
		return nil, nil, err
	}
	healthSrv := health.NewServer()
	healthpb.RegisterHealthServer(srv, healthSrv)
	reflection.Register(srv)
	return srv, healthSrv, nil
}

// hello implements greeterServer.
type hello struct{}

func (hello) Hello(_ context.Context, name *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	return wrapperspb.String("Hello, " + name.GetValue() + "!"), nil
}

// newRedis returns a cluster client if REDIS_CLUSTER_ADDRS is set, and a
// client of REDIS_URL otherwise.
//
// ContextTimeoutEnabled lets go-redis itself give up at the limiter's
// timeout, the fastest way for a dead Redis to cost at most that timeout.
func newRedis() (redis.UniversalClient, error) {
	if addrs := os.Getenv("REDIS_CLUSTER_ADDRS"); addrs != "" {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(addrs, ","), ContextTimeoutEnabled: true}), nil
	}
	opt, err := redis.ParseURL(envOr("REDIS_URL", "redis://127.0.0.1:6379/0"))
	if err != nil {
		return nil, fmt.Errorf("REDIS_URL: %w", err)
	}
	opt.ContextTimeoutEnabled = true
	return redis.NewClient(opt), nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
