// Command fiber is a Fiber v2 server whose GET /ping is limited to 5
// requests per 10 seconds per client IP, one limit shared through Redis by
// every instance of the server.
//
// Environment:
//
//	ADDR                 listen address (default ":8080")
//	REDIS_URL            Redis to use (default "redis://127.0.0.1:6379/0")
//	REDIS_CLUSTER_ADDRS  host:port,host:port,... selects Redis Cluster instead
//	TRUSTED_PROXIES      IPs or CIDRs of proxies whose X-Real-IP to believe,
//	                     comma-separated (default: none)
//
// Behind a proxy, list it in TRUSTED_PROXIES and have it set X-Real-IP to
// the address it received the request from (nginx: proxy_set_header
// X-Real-IP $remote_addr). Fiber reads the left-most address of a
// forwarding header, which a client can forge in an X-Forwarded-For that
// the proxy appends to, so this server reads X-Real-IP.
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
	proxies, err := slidelimit.ParseTrustedProxies(strings.Split(os.Getenv("TRUSTED_PROXIES"), ",")...)
	if err != nil {
		return fmt.Errorf("TRUSTED_PROXIES: %w", err)
	}
	app := newApp(lim, proxies)

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
// GET /healthz around it. Only the listed proxies' X-Real-IP is believed;
// with none, the client IP is the peer address.
func newApp(lim *slidelimit.Limiter, trustedProxies slidelimit.TrustedProxies) *fiber.App {
	cfg := fiber.Config{DisableStartupMessage: true} // run logs the address
	if len(trustedProxies) > 0 {
		// Without EnableTrustedProxyCheck, Fiber believes ProxyHeader from
		// anyone; with EnableIPValidation, a missing or bad header falls
		// back to the peer address.
		cfg.ProxyHeader = "X-Real-IP"
		cfg.EnableTrustedProxyCheck = true
		for _, p := range trustedProxies {
			cfg.TrustedProxies = append(cfg.TrustedProxies, p.String()) // always a CIDR
		}
		cfg.EnableIPValidation = true
	}
	app := fiber.New(cfg)
	limit := fiberlimit.New(lim, fiberlimit.Config{ // keyed by client IP, IPv6 grouped by /64
		KeyGenerator: fiberlimit.ClientIP{TrustedProxies: trustedProxies, Header: slidelimit.HeaderXRealIP}.Key,
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
