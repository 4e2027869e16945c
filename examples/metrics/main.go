// Command metrics is a net/http server whose GET /ping is limited to 5
// requests per 10 seconds per client IP, one limit shared through Redis by
// every instance of the server, and whose GET /metrics shows the limiter's
// decisions and their latency to Prometheus. With SHADOW=1 the limit runs in
// shadow mode: nothing is refused, and /metrics counts what would have been.
//
// Environment:
//
//	ADDR                 listen address (default ":8080")
//	REDIS_URL            Redis to use (default "redis://127.0.0.1:6379/0")
//	REDIS_CLUSTER_ADDRS  host:port,host:port,... selects Redis Cluster instead
//	TRUSTED_PROXIES      CIDRs or IPs of the proxies whose forwarding header
//	                     to believe, comma-separated (default: none)
//	CLIENT_IP_HEADER     the header those proxies set: X-Forwarded-For
//	                     (default), Forwarded, or X-Real-IP (opt-in, for a
//	                     proxy that overwrites it)
//	SHADOW               1 runs the limit in shadow mode (default: enforce)
//
// It stops gracefully on SIGINT or SIGTERM.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/httplimit"
	promlimit "github.com/slidelimit/slidelimit/prometheus"
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
		log.Printf("redis does not answer yet (requests pass unlimited until it does): %v", err)
	}
	cancel()

	// A service usually registers with prometheus.DefaultRegisterer, next
	// to the Go runtime's metrics; this registry holds the limiter's only.
	metrics := promlimit.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics)
	shadow := os.Getenv("SHADOW") == "1"
	if shadow {
		log.Print("shadow mode: requests over the limit pass, counted as shadow_denied")
	}
	lim, err := newLimiter(rdb, metrics, shadow)
	if err != nil {
		return err
	}
	// The client IP, the same way in every example: by slidelimit.ClientIP.
	ip, err := slidelimit.ParseClientIP(os.Getenv("TRUSTED_PROXIES"), os.Getenv("CLIENT_IP_HEADER"))
	if err != nil {
		return fmt.Errorf("TRUSTED_PROXIES, CLIENT_IP_HEADER: %w", err)
	}

	ln, err := net.Listen("tcp", envOr("ADDR", ":8080"))
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: newHandler(lim, reg, ip), ReadHeaderTimeout: 10 * time.Second}
	log.Printf("listening on %s", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()

	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Print("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// newLimiter returns the limit of GET /ping, 5 per 10 seconds, reporting
// its decisions to metrics as the limiter "ping"; in shadow mode if shadow.
func newLimiter(rdb redis.UniversalClient, metrics *promlimit.Metrics, shadow bool, opts ...slidelimit.Option) (*slidelimit.Limiter, error) {
	opts = append(opts, slidelimit.WithObserver(metrics.Observer("ping")))
	if shadow {
		opts = append(opts, slidelimit.WithShadow())
	}
	return slidelimit.New(rdb, slidelimit.Per(5, 10*time.Second), opts...)
}

// newHandler routes GET /ping through the limiter, keyed by client IP, and
// GET /metrics and GET /healthz around it. The client IP is ip's: the peer
// address, or, from one of its trusted proxies, the address their
// forwarding header names, as slidelimit.ClientIP resolves it.
func newHandler(lim *slidelimit.Limiter, reg *prometheus.Registry, ip slidelimit.ClientIP) http.Handler {
	limit := httplimit.New(lim, httplimit.WithKey(httplimit.ClientIP(ip).Key))

	mux := http.NewServeMux()
	mux.Handle("GET /ping", limit(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "pong\n")
	})))
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	return mux
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
