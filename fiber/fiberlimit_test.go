package fiberlimit_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/httplimit"
	"github.com/slidelimit/slidelimit/core/redistest"
	fiberlimit "github.com/slidelimit/slidelimit/fiber"
)

func TestNewFiveThenDenied(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, redistest.Client(t), per5)
	app := newApp()
	app.Use(fiberlimit.New(lim))
	app.Get("/ping", ok)
	c := serve(t, app)

	for i := range 5 {
		r := c.get("/ping")
		if r.status != http.StatusOK {
			t.Fatalf("request %d: status = %d, want 200", i+1, r.status)
		}
		want := map[string]string{
			"RateLimit-Policy":      `"5/10s";q=5;w=10`,
			"RateLimit":             fmt.Sprintf(`"5/10s";r=%d;t=10`, 4-i),
			"X-RateLimit-Limit":     "5",
			"X-RateLimit-Remaining": fmt.Sprint(4 - i),
			"X-RateLimit-Reset":     "10",
			"Retry-After":           "",
		}
		for name, v := range want {
			if got := r.header.Get(name); got != v {
				t.Errorf("request %d: %s = %q, want %q", i+1, name, got, v)
			}
		}
	}

	r := c.get("/ping")
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("request 6: status = %d, want 429", r.status)
	}
	retry := atoi(t, "Retry-After", r.header.Get("Retry-After"))
	if retry < 1 || retry > 10 {
		t.Errorf("request 6: Retry-After = %d, want 1..10", retry)
	}
	want := map[string]string{
		"RateLimit-Policy":      `"5/10s";q=5;w=10`,
		"RateLimit":             fmt.Sprintf(`"5/10s";r=0;t=%d`, retry),
		"X-RateLimit-Limit":     "5",
		"X-RateLimit-Remaining": "0",
		"X-RateLimit-Reset":     fmt.Sprint(retry),
		"Content-Type":          httplimit.ContentTypeProblem,
	}
	for name, v := range want {
		if got := r.header.Get(name); got != v {
			t.Errorf("request 6: %s = %q, want %q", name, got, v)
		}
	}
	var p httplimit.Problem
	if err := json.Unmarshal([]byte(r.body), &p); err != nil {
		t.Fatalf("request 6: body %q is not a problem document: %v", r.body, err)
	}
	if p.Type != httplimit.ProblemTypeQuotaExceeded || p.Status != 429 || p.Policy != "5/10s" || p.RetryAfter != int64(retry) {
		t.Errorf("request 6: problem = %+v, want type quota-exceeded, status 429, policy 5/10s, retry_after %d", p, retry)
	}
}

func TestNewIsolatesKeys(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, redistest.Client(t), per5)
	app := newApp()
	app.Use(fiberlimit.New(lim, fiberlimit.Config{KeyGenerator: fiberlimit.KeyByHeader("X-API-Key")}))
	app.Get("/ping", ok)
	c := serve(t, app)

	for range 5 {
		c.get("/ping", "X-API-Key", "alice")
	}
	if r := c.get("/ping", "X-API-Key", "alice"); r.status != http.StatusTooManyRequests {
		t.Errorf("alice's 6th request: status = %d, want 429", r.status)
	}
	r := c.get("/ping", "X-API-Key", "bob")
	if r.status != http.StatusOK || r.header.Get("X-RateLimit-Remaining") != "4" {
		t.Errorf("bob's 1st request: status %d, X-RateLimit-Remaining %q, want 200, 4",
			r.status, r.header.Get("X-RateLimit-Remaining"))
	}
}

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

func TestNewNextSkips(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, redistest.Client(t), per5)
	app := newApp()
	app.Use(fiberlimit.New(lim, fiberlimit.Config{
		Next: func(c *fiber.Ctx) bool { return c.Path() == "/healthz" },
	}))
	app.Get("/healthz", ok)
	app.Get("/ping", ok)
	c := serve(t, app)

	for range 7 {
		r := c.get("/healthz")
		if r.status != http.StatusOK {
			t.Fatalf("GET /healthz: status = %d, want 200", r.status)
		}
		noQuotaHeaders(t, "GET /healthz", r)
	}
	if got := remaining(t, lim, "ip:127.0.0.1"); got != 5 {
		t.Errorf("remaining after skipped requests = %d, want 5", got)
	}
	if r := c.get("/ping"); r.header.Get("X-RateLimit-Remaining") != "4" {
		t.Errorf("GET /ping: X-RateLimit-Remaining = %q, want 4", r.header.Get("X-RateLimit-Remaining"))
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

func TestNewMultipleLimits(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, redistest.Client(t), per5, slidelimit.WithLimits(slidelimit.Per(2, time.Minute)))
	app := newApp()
	app.Use(fiberlimit.New(lim))
	app.Get("/ping", ok)
	c := serve(t, app)

	const policy = `"5/10s";q=5;w=10, "2/1m";q=2;w=60`
	for i, want := range []string{`"5/10s";r=4;t=10, "2/1m";r=1;t=60`, `"5/10s";r=3;t=10, "2/1m";r=0;t=60`} {
		r := c.get("/ping")
		if r.status != 200 || r.header.Get("RateLimit-Policy") != policy || r.header.Get("RateLimit") != want {
			t.Errorf("request %d = %d, RateLimit-Policy %q, RateLimit %q; want 200, %q, %q",
				i+1, r.status, r.header.Get("RateLimit-Policy"), r.header.Get("RateLimit"), policy, want)
		}
		if got := r.header.Get("X-RateLimit-Limit"); got != "2" {
			t.Errorf("request %d: X-RateLimit-Limit = %q, want 2 (the limit with fewest left)", i+1, got)
		}
	}
	r := c.get("/ping")
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("request 3: status = %d, want 429", r.status)
	}
	retry := atoi(t, "Retry-After", r.header.Get("Retry-After"))
	if retry < 50 || retry > 60 || r.header.Get("X-RateLimit-Limit") != "2" || !strings.Contains(r.body, `"policy":"2/1m"`) {
		t.Errorf("request 3: Retry-After %d, X-RateLimit-Limit %q, body %q; want 50..60, 2, policy 2/1m",
			retry, r.header.Get("X-RateLimit-Limit"), r.body)
	}
}

func TestNewRefunds(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	tests := []struct {
		name   string
		config fiberlimit.Config
		// path → remaining units after one request to it
		want map[string]int
	}{
		{
			name: "count-all",
			want: map[string]int{"/ok": 4, "/bad": 4, "/missing": 4, "/boom": 4},
		},
		{
			name:   "skip-failed",
			config: fiberlimit.Config{SkipFailedRequests: true},
			want:   map[string]int{"/ok": 4, "/bad": 5, "/missing": 5, "/boom": 5},
		},
		{
			name:   "skip-successful",
			config: fiberlimit.Config{SkipSuccessfulRequests: true},
			want:   map[string]int{"/ok": 5, "/bad": 4, "/missing": 4, "/boom": 4},
		},
		{
			name:   "skip-failed-5xx",
			config: fiberlimit.Config{SkipFailedRequests: true, Failed: func(status int) bool { return status >= 500 }},
			want:   map[string]int{"/ok": 4, "/bad": 4, "/missing": 4, "/boom": 5},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			lim := newLimiter(t, rdb, per5)
			cfg := tt.config
			cfg.KeyGenerator = fiberlimit.KeyByHeader("X-Test")
			app := newApp()
			app.Use(fiberlimit.New(lim, cfg))
			app.Get("/ok", ok)
			app.Get("/bad", func(c *fiber.Ctx) error { return c.Status(http.StatusBadRequest).SendString("bad") })
			app.Get("/missing", func(*fiber.Ctx) error { return fiber.ErrNotFound })
			app.Get("/boom", func(*fiber.Ctx) error { return errors.New("boom") })
			c := serve(t, app)

			for path, want := range tt.want {
				c.get(path, "X-Test", path)
				if got := remaining(t, lim, slidelimit.HeaderIdentity("X-Test", path)); got != want {
					t.Errorf("remaining after GET %s = %d, want %d", path, got, want)
				}
			}
		})
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

func TestNewRedisDown(t *testing.T) {
	t.Parallel()
	tests := []struct {
		policy     slidelimit.FailurePolicy
		wantStatus int
		wantRetry  string
	}{
		{slidelimit.FailOpen, http.StatusOK, ""},
		{slidelimit.FailClosed, http.StatusServiceUnavailable, "1"},
	}
	for _, tt := range tests {
		t.Run(tt.policy.String(), func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
			t.Cleanup(func() { _ = rdb.Close() })
			lim := newLimiter(t, rdb, per5, slidelimit.WithFailurePolicy(tt.policy))
			var hook hookErrors
			app := newApp()
			app.Use(fiberlimit.New(lim, fiberlimit.Config{ErrorHook: hook.hook}))
			app.Get("/ping", ok)
			c := serve(t, app)

			if r := c.get("/ping"); r.status != http.StatusOK || r.header.Get("RateLimit") != `"5/10s";r=4;t=10` {
				t.Fatalf("Redis up: GET /ping = %d, RateLimit %q, want 200, \"5/10s\";r=4;t=10", r.status, r.header.Get("RateLimit"))
			}

			srv.Stop()
			r := c.get("/ping")
			if r.status != tt.wantStatus || r.header.Get("Retry-After") != tt.wantRetry {
				t.Errorf("Redis down: GET /ping = %d, Retry-After %q, want %d, %q", r.status, r.header.Get("Retry-After"), tt.wantStatus, tt.wantRetry)
			}
			if tt.wantStatus == http.StatusServiceUnavailable && r.body != "Service Unavailable" {
				t.Errorf("Redis down: body = %q, want Service Unavailable", r.body)
			}
			noQuotaHeaders(t, "Redis down", r)
			if errs := hook.all(); len(errs) != 1 || !errors.Is(errs[0], slidelimit.ErrUnavailable) {
				t.Errorf("Redis down: ErrorHook got %v, want one error wrapping ErrUnavailable", errs)
			}

			// The restarted server is empty: the first request that reaches
			// it is the first of a new window.
			srv.Restart()
			deadline := time.Now().Add(10 * time.Second)
			for {
				r := c.get("/ping")
				if r.status == http.StatusOK && r.header.Get("RateLimit") == `"5/10s";r=4;t=10` {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("Redis back: GET /ping = %d, RateLimit %q, want 200, \"5/10s\";r=4;t=10 within 10s",
						r.status, r.header.Get("RateLimit"))
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

func TestNewRedisCluster(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, redistest.ClusterClient(t), per5)
	app := newApp()
	app.Use(fiberlimit.New(lim))
	app.Get("/ping", ok)
	c := serve(t, app)

	for i, want := range []int{200, 200, 200, 200, 200, 429} {
		if r := c.get("/ping"); r.status != want || r.header.Get("X-RateLimit-Remaining") != fmt.Sprint(max(0, 4-i)) {
			t.Errorf("GET /ping #%d = %d, X-RateLimit-Remaining %q; want %d, %d", i+1, r.status, r.header.Get("X-RateLimit-Remaining"), want, max(0, 4-i))
		}
	}
}
