// Command gin is a Gin server whose GET /ping is limited to 5 requests per
// 10 seconds per client IP, one limit shared through Redis by every
// instance of the server.
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
//	GIN_MODE             debug (default), release or test, as for any Gin app
//
// It stops gracefully on SIGINT or SIGTERM.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	ginlimit "github.com/slidelimit/slidelimit/gin"
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

	lim, err := slidelimit.New(rdb, slidelimit.Per(5, 10*time.Second))
	if err != nil {
		return err
	}
	// The client IP, the same way in every example: by slidelimit.ClientIP.
	ip, err := slidelimit.ParseClientIP(os.Getenv("TRUSTED_PROXIES"), os.Getenv("CLIENT_IP_HEADER"))
	if err != nil {
		return fmt.Errorf("TRUSTED_PROXIES, CLIENT_IP_HEADER: %w", err)
	}
	router, err := newRouter(lim, ip)
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", envOr("ADDR", ":8080"))
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: router, ReadHeaderTimeout: 10 * time.Second}
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

// newRouter routes GET /ping through the limiter, keyed by client IP, and
// GET /healthz around it. The client IP is ip's: the peer address, or,
// from one of its trusted proxies, the address their forwarding header
// names, as slidelimit.ClientIP resolves it in every example.
func newRouter(lim *slidelimit.Limiter, ip slidelimit.ClientIP) (*gin.Engine, error) {
	r := gin.New()
	r.Use(gin.Logger(), gin.Recovery())
	// Gin trusts every proxy until told otherwise; nil trusts none. This
	// is for the app's own c.ClientIP(); the limiter does not use it.
	var cidrs []string
	for _, p := range ip.TrustedProxies {
		cidrs = append(cidrs, p.String())
	}
	if err := r.SetTrustedProxies(cidrs); err != nil {
		return nil, fmt.Errorf("trusted proxies: %w", err)
	}
	limit := ginlimit.New(lim, ginlimit.WithKey(ginlimit.ClientIP(ip).Key))

	r.GET("/ping", limit, func(c *gin.Context) { c.String(http.StatusOK, "pong\n") })
	r.GET("/healthz", func(c *gin.Context) { c.String(http.StatusOK, "ok\n") })
	return r, nil
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
