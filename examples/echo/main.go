// Command echo is an Echo v4 server whose GET /ping is limited to 5
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
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	echolimit "github.com/slidelimit/slidelimit/echo"
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
	e := newServer(lim, ip)

	ln, err := net.Listen("tcp", envOr("ADDR", ":8080"))
	if err != nil {
		return err
	}
	e.Listener = ln
	e.Server.ReadHeaderTimeout = 10 * time.Second
	log.Printf("listening on %s", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- e.Start("") }()

	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Print("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.Shutdown(shutdownCtx); err != nil {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// newServer routes GET /ping through the limiter, keyed by client IP, and
// GET /healthz around it. The client IP is ip's: the peer address, or,
// from one of its trusted proxies, the address their forwarding header
// names, as slidelimit.ClientIP resolves it in every example.
func newServer(lim *slidelimit.Limiter, ip slidelimit.ClientIP) *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true // run logs the address
	// Without an IPExtractor, c.RealIP() believes X-Forwarded-For from
	// anyone; set one, so that the app's own uses of c.RealIP() are safe
	// too. echolimit resolves the client itself, by slidelimit.ClientIP.
	if len(ip.TrustedProxies) == 0 {
		e.IPExtractor = echo.ExtractIPDirect()
	} else {
		trust := []echo.TrustOption{
			// Only the listed proxies: Echo trusts loopback, link-local and
			// private addresses unless told otherwise.
			echo.TrustLoopback(false), echo.TrustLinkLocal(false), echo.TrustPrivateNet(false),
		}
		for _, p := range ip.TrustedProxies {
			trust = append(trust, echo.TrustIPRange(ipNet(p)))
		}
		e.IPExtractor = echo.ExtractIPFromXFFHeader(trust...)
	}
	limit := echolimit.NewWithConfig(lim, echolimit.Config{ // keyed by client IP, IPv6 grouped by /64
		IdentifierExtractor: echolimit.ClientIP(ip).Key,
	})

	e.GET("/ping", func(c echo.Context) error { return c.String(http.StatusOK, "pong\n") }, limit)
	e.GET("/healthz", func(c echo.Context) error { return c.String(http.StatusOK, "ok\n") })
	return e
}

// ipNet converts a network to the form Echo takes.
func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
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
