package fiberlimit_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
	fiberlimit "github.com/slidelimit/slidelimit/fiber"
)

func TestClientIP(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	loopback := slidelimit.TrustedProxies{netip.MustParsePrefix("127.0.0.0/8")}
	tests := []struct {
		name   string
		app    fiber.Config
		config fiberlimit.Config
		xff    string
		want   string
	}{
		{
			name: "no-proxy-header",
			xff:  "203.0.113.7",
			want: "ip:127.0.0.1",
		},
		{
			name: "untrusted-peer",
			app:  fiber.Config{ProxyHeader: fiber.HeaderXForwardedFor, EnableTrustedProxyCheck: true, TrustedProxies: []string{"10.0.0.0/8"}},
			xff:  "203.0.113.7",
			want: "ip:127.0.0.1",
		},
		{
			name: "proxy-header-ignored-by-default",
			app:  fiber.Config{ProxyHeader: fiber.HeaderXForwardedFor, EnableTrustedProxyCheck: true, TrustedProxies: []string{"127.0.0.1"}},
			xff:  "203.0.113.7",
			want: "ip:127.0.0.1",
		},
		{
			name:   "fiber-ip-trusted-peer",
			app:    fiber.Config{ProxyHeader: fiber.HeaderXForwardedFor, EnableTrustedProxyCheck: true, TrustedProxies: []string{"127.0.0.1"}},
			config: fiberlimit.Config{KeyGenerator: fiberlimit.KeyByFiberIP},
			xff:    "203.0.113.7",
			want:   "ip:203.0.113.7",
		},
		{
			name:   "fiber-ip-validation",
			app:    fiber.Config{ProxyHeader: fiber.HeaderXForwardedFor, EnableTrustedProxyCheck: true, TrustedProxies: []string{"127.0.0.0/8"}, EnableIPValidation: true},
			config: fiberlimit.Config{KeyGenerator: fiberlimit.KeyByFiberIP},
			xff:    "bogus, 198.51.100.2, 127.0.0.1",
			want:   "ip:198.51.100.2",
		},
		{
			name:   "client-ip-trusted-peer",
			config: fiberlimit.Config{KeyGenerator: fiberlimit.ClientIP{TrustedProxies: loopback}.Key},
			xff:    "bogus, 198.51.100.2, 127.0.0.1",
			want:   "ip:198.51.100.2",
		},
		{
			name:   "ipv6-64",
			config: fiberlimit.Config{KeyGenerator: fiberlimit.ClientIP{TrustedProxies: loopback}.Key},
			xff:    "2001:db8:1:2:aaaa::1",
			want:   "ip:2001:db8:1:2::/64",
		},
		{
			name:   "ipv6-48",
			config: fiberlimit.Config{KeyGenerator: fiberlimit.ClientIP{TrustedProxies: loopback, IPv6Prefix: 48}.Key},
			xff:    "2001:db8:1:2:aaaa::1",
			want:   "ip:2001:db8:1::/48",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var obs observed
			lim := newLimiter(t, rdb, per5, slidelimit.WithObserver(obs.observe))
			app := newApp(tt.app)
			app.Use(fiberlimit.New(lim, tt.config))
			app.Get("/ping", ok)
			c := serve(t, app)

			if r := c.get("/ping", "X-Forwarded-For", tt.xff); r.status != http.StatusOK {
				t.Fatalf("GET /ping: status = %d, want 200", r.status)
			}
			if got := obs.identities(); !slices.Equal(got, []string{tt.want}) {
				t.Errorf("identities = %q, want [%q]", got, tt.want)
			}
		})
	}
}

func TestKeyCopiedOutOfFiberBuffers(t *testing.T) {
	t.Parallel()
	var obs observed
	lim := newLimiter(t, redistest.Client(t), slidelimit.Per(1000, time.Minute), slidelimit.WithObserver(obs.observe))
	app := newApp()
	app.Use(fiberlimit.New(lim, fiberlimit.Config{KeyGenerator: func(c *fiber.Ctx) string {
		return c.Get("X-API-Key") // a view into a buffer Fiber reuses
	}}))
	app.Get("/ping", ok)
	c := serve(t, app)

	var want []string
	for i := range 20 {
		key := fmt.Sprintf("key-%02d", i)
		want = append(want, key)
		c.get("/ping", "X-API-Key", key)
	}
	if got := obs.identities(); !slices.Equal(got, want) {
		t.Errorf("identities kept after the requests = %q, want %q", got, want)
	}
}

func TestNewCustomLimitReached(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, redistest.Client(t), slidelimit.Per(1, 10*time.Second))
	app := newApp()
	app.Use(fiberlimit.New(lim, fiberlimit.Config{
		LimitReached: func(c *fiber.Ctx, res slidelimit.Result) error {
			return c.Status(http.StatusServiceUnavailable).JSON(fiber.Map{"limit": res.Limit.String(), "allowed": res.Allowed})
		},
	}))
	app.Get("/ping", ok)
	c := serve(t, app)

	c.get("/ping")
	r := c.get("/ping")
	if r.status != http.StatusServiceUnavailable || r.body != `{"allowed":false,"limit":"1/10s"}` {
		t.Errorf("denied request = %d %q, want 503 {\"allowed\":false,\"limit\":\"1/10s\"}", r.status, r.body)
	}
	if r.header.Get("Retry-After") == "" || r.header.Get("RateLimit") == "" {
		t.Errorf("denied request: Retry-After %q, RateLimit %q, want both set before LimitReached",
			r.header.Get("Retry-After"), r.header.Get("RateLimit"))
	}
}

func TestNewPerRouteLimits(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	general := newLimiter(t, rdb, per5)
	search := newLimiter(t, rdb, slidelimit.Per(2, 10*time.Second))

	t.Run("Limiter chooses per request", func(t *testing.T) {
		t.Parallel()
		app := newApp()
		app.Use(fiberlimit.New(general, fiberlimit.Config{
			Limiter: func(c *fiber.Ctx) *slidelimit.Limiter {
				if strings.HasPrefix(c.Path(), "/search") {
					return search
				}
				return nil // the limiter given to New
			},
			KeyGenerator: fiberlimit.JoinKeys(fiberlimit.KeyByHeader("X-Test"), fiberlimit.KeyByIP),
		}))
		app.Get("/search", ok)
		app.Get("/ping", ok)
		c := serve(t, app)
		checkPolicies(t, c, "limiter")
	})
	t.Run("middleware per route", func(t *testing.T) {
		t.Parallel()
		key := fiberlimit.Config{KeyGenerator: fiberlimit.JoinKeys(fiberlimit.KeyByHeader("X-Test"), fiberlimit.KeyByRoute, fiberlimit.KeyByIP)}
		app := newApp()
		app.Get("/search", fiberlimit.New(search, key), ok)
		app.Get("/ping", fiberlimit.New(general, key), ok)
		c := serve(t, app)
		checkPolicies(t, c, "route")
	})
}

// checkPolicies checks that /search is limited to 2 and /ping to 5, each
// with its own count.
func checkPolicies(t *testing.T, c *client, test string) {
	t.Helper()
	for i, want := range []int{200, 200, 429} {
		if r := c.get("/search", "X-Test", test); r.status != want || r.header.Get("RateLimit-Policy") != `"2/10s";q=2;w=10` {
			t.Errorf("GET /search #%d = %d, policy %q, want %d, \"2/10s\";q=2;w=10", i+1, r.status, r.header.Get("RateLimit-Policy"), want)
		}
	}
	r := c.get("/ping", "X-Test", test)
	if r.status != 200 || r.header.Get("RateLimit") != `"5/10s";r=4;t=10` {
		t.Errorf("GET /ping = %d, RateLimit %q, want 200, \"5/10s\";r=4;t=10", r.status, r.header.Get("RateLimit"))
	}
}

func TestUndecidable(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	lim := newLimiter(t, rdb, per5)
	tests := []struct {
		name   string
		lim    *slidelimit.Limiter
		config fiberlimit.Config
		want   error
	}{
		{name: "empty-key", lim: lim, config: fiberlimit.Config{KeyGenerator: fiberlimit.KeyByHeader("X-Absent")}, want: slidelimit.ErrInvalidKey},
		{name: "cost-above-quota", lim: lim, config: fiberlimit.Config{Cost: func(*fiber.Ctx) int { return 6 }}, want: slidelimit.ErrInvalidCost},
		{name: "no-limiter", config: fiberlimit.Config{Limiter: func(*fiber.Ctx) *slidelimit.Limiter { return nil }}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var hook hookErrors
			cfg := tt.config
			cfg.ErrorHook = hook.hook
			app := newApp()
			app.Use(fiberlimit.New(tt.lim, cfg))
			app.Get("/ping", ok)
			c := serve(t, app)

			r := c.get("/ping")
			if r.status != http.StatusInternalServerError || r.body != "Internal Server Error" {
				t.Errorf("GET /ping = %d %q, want 500 Internal Server Error", r.status, r.body)
			}
			errs := hook.all()
			if len(errs) != 1 || tt.want != nil && !errors.Is(errs[0], tt.want) {
				t.Errorf("ErrorHook got %v, want one error wrapping %v", errs, tt.want)
			}
		})
	}
}
