package echolimit_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/httplimit"
	"github.com/slidelimit/slidelimit/core/redistest"
	echolimit "github.com/slidelimit/slidelimit/echo"
)

func TestNewFiveThenDenied(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, redistest.Client(t), per5)
	e := echo.New()
	e.Use(echolimit.New(lim))
	e.GET("/ping", ok)

	for i := range 5 {
		rec := get(t, e, "/ping")
		if rec.Code != http.StatusOK {
			t.Fatalf("request %d: status = %d, want 200", i+1, rec.Code)
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
			if got := rec.Header().Get(name); got != v {
				t.Errorf("request %d: %s = %q, want %q", i+1, name, got, v)
			}
		}
	}

	rec := get(t, e, "/ping")
	if rec.Code != http.StatusTooManyRequests {
		t.Fatalf("request 6: status = %d, want 429", rec.Code)
	}
	retry := atoi(t, "Retry-After", rec.Header().Get("Retry-After"))
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
		if got := rec.Header().Get(name); got != v {
			t.Errorf("request 6: %s = %q, want %q", name, got, v)
		}
	}
	var p httplimit.Problem
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		t.Fatalf("request 6: body %q is not a problem document: %v", rec.Body, err)
	}
	if p.Type != httplimit.ProblemTypeQuotaExceeded || p.Status != 429 || p.Policy != "5/10s" || p.RetryAfter != int64(retry) {
		t.Errorf("request 6: problem = %+v, want type quota-exceeded, status 429, policy 5/10s, retry_after %d", p, retry)
	}
}

func TestDenialReachesHTTPErrorHandler(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, redistest.Client(t), slidelimit.Per(1, 10*time.Second))
	e := echo.New()
	var got error
	var retryAfter string
	e.HTTPErrorHandler = func(err error, c echo.Context) {
		got = err
		retryAfter = c.Response().Header().Get("Retry-After")
		c.Response().Header().Set(echo.HeaderContentType, echo.MIMETextPlainCharsetUTF8)
		_ = c.String(http.StatusTeapot, "custom")
	}
	e.Use(echolimit.New(lim))
	e.GET("/ping", ok)

	get(t, e, "/ping")
	rec := get(t, e, "/ping")
	var he *echo.HTTPError
	if !errors.As(got, &he) || he.Code != http.StatusTooManyRequests {
		t.Fatalf("HTTPErrorHandler got %v, want an *echo.HTTPError with code 429", got)
	}
	if p, ok := he.Message.(httplimit.Problem); !ok || p.Policy != "1/10s" {
		t.Errorf("HTTPError.Message = %#v, want a httplimit.Problem with policy 1/10s", he.Message)
	}
	if retryAfter == "" {
		t.Error("Retry-After was not set when HTTPErrorHandler ran")
	}
	if rec.Code != http.StatusTeapot || rec.Body.String() != "custom" || rec.Header().Get("Content-Type") != echo.MIMETextPlainCharsetUTF8 {
		t.Errorf("response = %d %q %q, want the handler's 418 custom text/plain", rec.Code, rec.Body, rec.Header().Get("Content-Type"))
	}
}

func TestNewIsolatesKeys(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, redistest.Client(t), per5)
	e := echo.New()
	// Echo's own Extractor type fits the field.
	var key middleware.Extractor = echolimit.KeyByHeader("X-API-Key")
	e.Use(echolimit.NewWithConfig(lim, echolimit.Config{IdentifierExtractor: key}))
	e.GET("/ping", ok)

	for range 5 {
		get(t, e, "/ping", "X-API-Key", "alice")
	}
	if rec := get(t, e, "/ping", "X-API-Key", "alice"); rec.Code != http.StatusTooManyRequests {
		t.Errorf("alice's 6th request: status = %d, want 429", rec.Code)
	}
	rec := get(t, e, "/ping", "X-API-Key", "bob")
	if rec.Code != http.StatusOK || rec.Header().Get("X-RateLimit-Remaining") != "4" {
		t.Errorf("bob's 1st request: status %d, X-RateLimit-Remaining %q, want 200, 4",
			rec.Code, rec.Header().Get("X-RateLimit-Remaining"))
	}
}

func TestClientIP(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	cidr := func(s string) *net.IPNet {
		_, n, err := net.ParseCIDR(s)
		if err != nil {
			t.Fatalf("net.ParseCIDR(%q) error = %v", s, err)
		}
		return n
	}
	tests := []struct {
		name      string
		extractor echo.IPExtractor
		config    echolimit.Config
		remote    string
		header    []string
		want      string
	}{
		{
			name:   "no-extractor-xff",
			header: []string{"X-Forwarded-For", "203.0.113.7"},
			want:   "ip:192.0.2.1",
		},
		{
			name:   "no-extractor-real-ip",
			header: []string{"X-Real-IP", "203.0.113.7"},
			want:   "ip:192.0.2.1",
		},
		{
			name:      "untrusted-peer",
			config:    echolimit.Config{IdentifierExtractor: echolimit.KeyByRealIP},
			extractor: echo.ExtractIPFromXFFHeader(echo.TrustIPRange(cidr("10.0.0.0/8"))),
			header:    []string{"X-Forwarded-For", "203.0.113.7"},
			want:      "ip:192.0.2.1",
		},
		{
			name:      "trusted-peer",
			config:    echolimit.Config{IdentifierExtractor: echolimit.KeyByRealIP},
			extractor: echo.ExtractIPFromXFFHeader(echo.TrustIPRange(cidr("192.0.2.0/24"))),
			header:    []string{"X-Forwarded-For", "203.0.113.7"},
			want:      "ip:203.0.113.7",
		},
		{
			name:      "trusted-peer-forged-hop",
			config:    echolimit.Config{IdentifierExtractor: echolimit.KeyByRealIP},
			extractor: echo.ExtractIPFromXFFHeader(echo.TrustIPRange(cidr("192.0.2.0/24"))),
			header:    []string{"X-Forwarded-For", "198.51.100.66, 203.0.113.7"},
			want:      "ip:203.0.113.7",
		},
		{
			name:      "trusted-real-ip",
			config:    echolimit.Config{IdentifierExtractor: echolimit.KeyByRealIP},
			extractor: echo.ExtractIPFromRealIPHeader(echo.TrustIPRange(cidr("192.0.2.0/24"))),
			header:    []string{"X-Real-IP", "203.0.113.7"},
			want:      "ip:203.0.113.7",
		},
		{
			name:      "extractor-ignored-by-default",
			extractor: echo.ExtractIPFromXFFHeader(echo.TrustIPRange(cidr("192.0.2.0/24"))),
			header:    []string{"X-Forwarded-For", "203.0.113.7"},
			want:      "ip:192.0.2.1",
		},
		{
			name:   "ipv6-64",
			remote: "[2001:db8:1:2:aaaa::1]:41000",
			want:   "ip:2001:db8:1:2::/64",
		},
		{
			name:   "ipv6-48",
			config: echolimit.Config{IPv6Prefix: 48},
			remote: "[2001:db8:1:2:aaaa::1]:41000",
			want:   "ip:2001:db8:1::/48",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var obs observed
			lim := newLimiter(t, rdb, per5, slidelimit.WithObserver(obs.observe))
			e := echo.New()
			e.IPExtractor = tt.extractor
			e.Use(echolimit.NewWithConfig(lim, tt.config))
			e.GET("/ping", ok)

			remote := tt.remote
			if remote == "" {
				remote = peer
			}
			if rec := getFrom(t, e, remote, "/ping", tt.header...); rec.Code != http.StatusOK {
				t.Fatalf("GET /ping: status = %d, want 200", rec.Code)
			}
			if got := obs.identities(); !slices.Equal(got, []string{tt.want}) {
				t.Errorf("identities = %q, want [%q]", got, tt.want)
			}
		})
	}
}

func TestNewSkipper(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, redistest.Client(t), per5)
	e := echo.New()
	// Echo's own Skipper type fits the field.
	var skip middleware.Skipper = func(c echo.Context) bool { return c.Path() == "/healthz" }
	e.Use(echolimit.NewWithConfig(lim, echolimit.Config{Skipper: skip}))
	e.GET("/healthz", ok)
	e.GET("/ping", ok)

	for range 7 {
		rec := get(t, e, "/healthz")
		if rec.Code != http.StatusOK {
			t.Fatalf("GET /healthz: status = %d, want 200", rec.Code)
		}
		noQuotaHeaders(t, "GET /healthz", rec)
	}
	if got := remaining(t, lim, "ip:192.0.2.1"); got != 5 {
		t.Errorf("remaining after skipped requests = %d, want 5", got)
	}
	if rec := get(t, e, "/ping"); rec.Header().Get("X-RateLimit-Remaining") != "4" {
		t.Errorf("GET /ping: X-RateLimit-Remaining = %q, want 4", rec.Header().Get("X-RateLimit-Remaining"))
	}
}

func TestNewCustomDenyHandler(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, redistest.Client(t), slidelimit.Per(1, 10*time.Second))
	e := echo.New()
	e.Use(echolimit.NewWithConfig(lim, echolimit.Config{
		DenyHandler: func(c echo.Context, res slidelimit.Result) error {
			return c.JSON(http.StatusServiceUnavailable, map[string]any{"limit": res.Limit.String(), "allowed": res.Allowed})
		},
	}))
	e.GET("/ping", ok)

	get(t, e, "/ping")
	rec := get(t, e, "/ping")
	if body := strings.TrimSpace(rec.Body.String()); rec.Code != http.StatusServiceUnavailable || body != `{"allowed":false,"limit":"1/10s"}` {
		t.Errorf("denied request = %d %q, want 503 {\"allowed\":false,\"limit\":\"1/10s\"}", rec.Code, body)
	}
	if rec.Header().Get("Retry-After") == "" || rec.Header().Get("RateLimit") == "" {
		t.Errorf("denied request: Retry-After %q, RateLimit %q, want both set before DenyHandler",
			rec.Header().Get("Retry-After"), rec.Header().Get("RateLimit"))
	}
}

func TestNewPerRouteLimits(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	general := newLimiter(t, rdb, per5)
	search := newLimiter(t, rdb, slidelimit.Per(2, 10*time.Second))

	t.Run("limiter-func", func(t *testing.T) {
		t.Parallel()
		e := echo.New()
		e.Use(echolimit.NewWithConfig(general, echolimit.Config{
			Limiter: func(c echo.Context) *slidelimit.Limiter {
				if c.Path() == "/search" {
					return search
				}
				return nil // the limiter given to NewWithConfig
			},
			IdentifierExtractor: echolimit.JoinKeys(echolimit.KeyByHeader("X-Test"), echolimit.KeyByIP),
		}))
		e.GET("/search", ok)
		e.GET("/ping", ok)
		checkPolicies(t, e, "limiter")
	})
	t.Run("route-middleware", func(t *testing.T) {
		t.Parallel()
		key := echolimit.Config{IdentifierExtractor: echolimit.JoinKeys(echolimit.KeyByHeader("X-Test"), echolimit.KeyByRoute, echolimit.KeyByIP)}
		e := echo.New()
		e.GET("/search", ok, echolimit.NewWithConfig(search, key))
		e.GET("/ping", ok, echolimit.NewWithConfig(general, key))
		checkPolicies(t, e, "route")
	})
}

// checkPolicies checks that /search is limited to 2 and /ping to 5, each
// with its own count.
func checkPolicies(t *testing.T, e *echo.Echo, test string) {
	t.Helper()
	for i, want := range []int{200, 200, 429} {
		if rec := get(t, e, "/search", "X-Test", test); rec.Code != want || rec.Header().Get("RateLimit-Policy") != `"2/10s";q=2;w=10` {
			t.Errorf("GET /search #%d = %d, policy %q, want %d, \"2/10s\";q=2;w=10", i+1, rec.Code, rec.Header().Get("RateLimit-Policy"), want)
		}
	}
	rec := get(t, e, "/ping", "X-Test", test)
	if rec.Code != 200 || rec.Header().Get("RateLimit") != `"5/10s";r=4;t=10` {
		t.Errorf("GET /ping = %d, RateLimit %q, want 200, \"5/10s\";r=4;t=10", rec.Code, rec.Header().Get("RateLimit"))
	}
}

func TestNewMultipleLimits(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, redistest.Client(t), per5, slidelimit.WithLimits(slidelimit.Per(2, time.Minute)))
	e := echo.New()
	e.Use(echolimit.New(lim))
	e.GET("/ping", ok)

	const policy = `"5/10s";q=5;w=10, "2/1m";q=2;w=60`
	for i, want := range []string{`"5/10s";r=4;t=10, "2/1m";r=1;t=60`, `"5/10s";r=3;t=10, "2/1m";r=0;t=60`} {
		rec := get(t, e, "/ping")
		if rec.Code != 200 || rec.Header().Get("RateLimit-Policy") != policy || rec.Header().Get("RateLimit") != want {
			t.Errorf("request %d = %d, RateLimit-Policy %q, RateLimit %q; want 200, %q, %q",
				i+1, rec.Code, rec.Header().Get("RateLimit-Policy"), rec.Header().Get("RateLimit"), policy, want)
		}
		if got := rec.Header().Get("X-RateLimit-Limit"); got != "2" {
			t.Errorf("request %d: X-RateLimit-Limit = %q, want 2 (the limit with fewest left)", i+1, got)
		}
	}
	rec := get(t, e, "/ping")
	if rec.Code != http.StatusTooManyRequests {
		t.Fatalf("request 3: status = %d, want 429", rec.Code)
	}
	retry := atoi(t, "Retry-After", rec.Header().Get("Retry-After"))
	if retry < 50 || retry > 60 || rec.Header().Get("X-RateLimit-Limit") != "2" || !strings.Contains(rec.Body.String(), `"policy":"2/1m"`) {
		t.Errorf("request 3: Retry-After %d, X-RateLimit-Limit %q, body %q; want 50..60, 2, policy 2/1m",
			retry, rec.Header().Get("X-RateLimit-Limit"), rec.Body)
	}
}

func TestNewRefunds(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	tests := []struct {
		name   string
		config echolimit.Config
		// path → remaining units after one request to it
		want map[string]int
	}{
		{
			name: "count-all",
			want: map[string]int{"/ok": 4, "/bad": 4, "/missing": 4, "/wrapped": 4, "/boom": 4},
		},
		{
			name:   "skip-failed",
			config: echolimit.Config{SkipFailedRequests: true},
			want:   map[string]int{"/ok": 4, "/bad": 5, "/missing": 5, "/wrapped": 5, "/boom": 5},
		},
		{
			name:   "skip-successful",
			config: echolimit.Config{SkipSuccessfulRequests: true},
			want:   map[string]int{"/ok": 5, "/bad": 4, "/missing": 4, "/wrapped": 4, "/boom": 4},
		},
		{
			name:   "skip-failed-5xx",
			config: echolimit.Config{SkipFailedRequests: true, Failed: func(status int) bool { return status >= 500 }},
			want:   map[string]int{"/ok": 4, "/bad": 4, "/missing": 4, "/wrapped": 4, "/boom": 5},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			lim := newLimiter(t, rdb, per5)
			cfg := tt.config
			cfg.IdentifierExtractor = echolimit.KeyByHeader("X-Test")
			e := echo.New()
			e.Use(echolimit.NewWithConfig(lim, cfg))
			e.GET("/ok", ok)
			e.GET("/bad", func(c echo.Context) error { return c.String(http.StatusBadRequest, "bad") })
			e.GET("/missing", func(echo.Context) error { return echo.ErrNotFound })
			e.GET("/wrapped", func(echo.Context) error {
				return echo.NewHTTPError(http.StatusInternalServerError).SetInternal(echo.ErrForbidden)
			})
			e.GET("/boom", func(echo.Context) error { return errors.New("boom") })

			for path, want := range tt.want {
				get(t, e, path, "X-Test", path)
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
		config echolimit.Config
		want   error
	}{
		{name: "no-header", lim: lim, config: echolimit.Config{IdentifierExtractor: echolimit.KeyByHeader("X-Absent")}, want: slidelimit.ErrInvalidKey},
		{name: "no-context-value", lim: lim, config: echolimit.Config{IdentifierExtractor: echolimit.KeyByContext("user")}, want: slidelimit.ErrInvalidKey},
		{name: "empty-key", lim: lim, config: echolimit.Config{IdentifierExtractor: func(echo.Context) (string, error) { return "", nil }}, want: slidelimit.ErrInvalidKey},
		{name: "cost-above-quota", lim: lim, config: echolimit.Config{Cost: func(echo.Context) int { return 6 }}, want: slidelimit.ErrInvalidCost},
		{name: "no-limiter", config: echolimit.Config{Limiter: func(echo.Context) *slidelimit.Limiter { return nil }}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var hook hookErrors
			cfg := tt.config
			cfg.ErrorHook = hook.hook
			e := echo.New()
			e.Use(echolimit.NewWithConfig(tt.lim, cfg))
			e.GET("/ping", ok)

			rec := get(t, e, "/ping")
			if body := strings.TrimSpace(rec.Body.String()); rec.Code != http.StatusInternalServerError || body != `{"message":"Internal Server Error"}` {
				t.Errorf("GET /ping = %d %q, want 500 {\"message\":\"Internal Server Error\"}", rec.Code, body)
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
		wantBody   string
	}{
		{slidelimit.FailOpen, http.StatusOK, "", "ok"},
		{slidelimit.FailClosed, http.StatusServiceUnavailable, "1", `{"message":"Service Unavailable"}`},
	}
	for _, tt := range tests {
		t.Run(tt.policy.String(), func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
			t.Cleanup(func() { _ = rdb.Close() })
			lim := newLimiter(t, rdb, per5, slidelimit.WithFailurePolicy(tt.policy))
			var hook hookErrors
			e := echo.New()
			var handled error
			e.HTTPErrorHandler = func(err error, c echo.Context) {
				handled = err
				e.DefaultHTTPErrorHandler(err, c)
			}
			e.Use(echolimit.NewWithConfig(lim, echolimit.Config{ErrorHook: hook.hook}))
			e.GET("/ping", ok)

			if rec := get(t, e, "/ping"); rec.Code != http.StatusOK || rec.Header().Get("RateLimit") != `"5/10s";r=4;t=10` {
				t.Fatalf("Redis up: GET /ping = %d, RateLimit %q, want 200, \"5/10s\";r=4;t=10", rec.Code, rec.Header().Get("RateLimit"))
			}

			srv.Stop()
			rec := get(t, e, "/ping")
			if body := strings.TrimSpace(rec.Body.String()); rec.Code != tt.wantStatus || rec.Header().Get("Retry-After") != tt.wantRetry || body != tt.wantBody {
				t.Errorf("Redis down: GET /ping = %d, Retry-After %q, body %q; want %d, %q, %q",
					rec.Code, rec.Header().Get("Retry-After"), body, tt.wantStatus, tt.wantRetry, tt.wantBody)
			}
			noQuotaHeaders(t, "Redis down", rec)
			if errs := hook.all(); len(errs) != 1 || !errors.Is(errs[0], slidelimit.ErrUnavailable) {
				t.Errorf("Redis down: ErrorHook got %v, want one error wrapping ErrUnavailable", errs)
			}
			if tt.policy == slidelimit.FailClosed {
				var he *echo.HTTPError
				if !errors.As(handled, &he) || he.Code != http.StatusServiceUnavailable || !errors.Is(he.Internal, slidelimit.ErrUnavailable) {
					t.Errorf("Redis down: HTTPErrorHandler got %v, want an *echo.HTTPError 503 with Internal wrapping ErrUnavailable", handled)
				}
			}

			// The restarted server is empty: the first request that reaches
			// it is the first of a new window.
			srv.Restart()
			deadline := time.Now().Add(10 * time.Second)
			for {
				rec := get(t, e, "/ping")
				if rec.Code == http.StatusOK && rec.Header().Get("RateLimit") == `"5/10s";r=4;t=10` {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("Redis back: GET /ping = %d, RateLimit %q, want 200, \"5/10s\";r=4;t=10 within 10s",
						rec.Code, rec.Header().Get("RateLimit"))
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

func TestNewRedisCluster(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, redistest.ClusterClient(t), per5)
	e := echo.New()
	e.Use(echolimit.New(lim))
	e.GET("/ping", ok)

	for i, want := range []int{200, 200, 200, 200, 200, 429} {
		if rec := get(t, e, "/ping"); rec.Code != want || rec.Header().Get("X-RateLimit-Remaining") != fmt.Sprint(max(0, 4-i)) {
			t.Errorf("GET /ping #%d = %d, X-RateLimit-Remaining %q; want %d, %d", i+1, rec.Code, rec.Header().Get("X-RateLimit-Remaining"), want, max(0, 4-i))
		}
	}
}
