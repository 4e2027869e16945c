// Command fiber is a Fiber v2 server whose GET /ping is limited to 5
// requests per 10 seconds per client IP, one limit shared through Redis by
// every instance of the server.
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

	"github.com/gofiber/fiber/v2"
	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	fiberlimit "github.com/slidelimit/slidelimit/fiber"
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
	app := newApp(lim, ip)

	ln, err := net.Listen("tcp", envOr("ADDR", ":8080"))
	if err != nil {
		return err
	}
	log.Printf("listening on %s", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- app.Listener(ln) }()

	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Print("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := app.ShutdownWithContext(shutdownCtx); err != nil {
		return err
	}
	// A shutdown that comes before the server has begun to accept does not
	// see the listener; closing it here stops the server either way.
	_ = ln.Close()
	return <-errc // nil once the listener is closed
}

// newApp routes GET /ping through the limiter, keyed by client IP, and
// GET /healthz around it. The client IP is ip's: the peer address, or,
// from one of its trusted proxies, the address their forwarding header
// names, as slidelimit.ClientIP resolves it in every example.
func newApp(lim *slidelimit.Limiter, ip slidelimit.ClientIP) *fiber.App {
	// Fiber's own ProxyHeader is left unset: the limiter resolves the
	// client itself, and c.IP() would take the left-most, forgeable
	// X-Forwarded-For address.
	app := fiber.New(fiber.Config{DisableStartupMessage: true}) // run logs the address
	limit := fiberlimit.New(lim, fiberlimit.Config{             // keyed by client IP, IPv6 grouped by /64
		KeyGenerator: fiberlimit.ClientIP(ip).Key,
	})

	app.Get("/ping", limit, func(c *fiber.Ctx) error { return c.SendString("pong\n") })
	app.Get("/healthz", func(c *fiber.Ctx) error { return c.SendString("ok\n") })
	return app
}

// newRedis returns a cluster client if REDIS_CLUSTER_ADDRS is set, and a
// client of REDIS_URL otherwise.
//
// ContextTimeoutEnabled lets go-redis itself give up at the limiter's
// timeout, the fastest way for a dead Redis to cost at most that timeout.
func newRedis() (redis.UniversalClient, error) {
	if addrs := os.Getenv("REDIS_CLUSTER_ADDRS"); addrs != "" {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: splitList(addrs), ContextTimeoutEnabled: true}), nil
	}
	opt, err := redis.ParseURL(envOr("REDIS_URL", "redis://127.0.0.1:6379/0"))
	if err != nil {
		return nil, fmt.Errorf("REDIS_URL: %w", err)
	}
	opt.ContextTimeoutEnabled = true
	return redis.NewClient(opt), nil
}

// splitList splits a comma-separated list, dropping empty items; an empty
// list is nil.
func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
