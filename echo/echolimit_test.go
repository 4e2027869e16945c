package echolimit_test

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/adaptertest"
	"github.com/slidelimit/slidelimit/core/httplimit"
	"github.com/slidelimit/slidelimit/core/redistest"
	echolimit "github.com/slidelimit/slidelimit/echo"
)

// TestMain gives the examples a Redis in REDIS_ADDR.
func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }

// per5 is the limit of most tests: 5 per 10 s.
var per5 = slidelimit.Per(5, 10*time.Second)

// peer is the client address of test requests, unless a test sets another.
const peer = "192.0.2.1:41000"

// ok answers 200 "ok".
func ok(c echo.Context) error { return c.String(http.StatusOK, "ok") }

// get serves GET path on e from peer, with the given header fields, name
// then value.
func get(t *testing.T, e *echo.Echo, path string, header ...string) *httptest.ResponseRecorder {
	t.Helper()
	return getFrom(t, e, peer, path, header...)
}

// getFrom serves GET path on e from the client address remote.
func getFrom(t *testing.T, e *echo.Echo, remote, path string, header ...string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequestWithContext(t.Context(), http.MethodGet, path, nil)
	req.RemoteAddr = remote
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	return rec
}

func TestDenialReachesHTTPErrorHandler(t *testing.T) {
	t.Parallel()
	lim := adaptertest.NewLimiter(t, redistest.Client(t), slidelimit.Per(1, 10*time.Second))
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
	// realIP keys by the extractor's client IP; trustPeer trusts the
	// test requests' peer as a proxy.
	realIP := echolimit.Config{IdentifierExtractor: echolimit.KeyByRealIP}
	trustPeer := echo.TrustIPRange(cidr("192.0.2.0/24"))
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
			config:    realIP,
			extractor: echo.ExtractIPFromXFFHeader(echo.TrustIPRange(cidr("10.0.0.0/8"))),
			header:    []string{"X-Forwarded-For", "203.0.113.7"},
			want:      "ip:192.0.2.1",
		},
		{
			name:      "trusted-peer",
			config:    realIP,
			extractor: echo.ExtractIPFromXFFHeader(trustPeer),
			header:    []string{"X-Forwarded-For", "203.0.113.7"},
			want:      "ip:203.0.113.7",
		},
		{
			name:      "trusted-peer-forged-hop",
			config:    realIP,
			extractor: echo.ExtractIPFromXFFHeader(trustPeer),
			header:    []string{"X-Forwarded-For", "198.51.100.66, 203.0.113.7"},
			want:      "ip:203.0.113.7",
		},
		{
			name:      "trusted-real-ip",
			config:    realIP,
			extractor: echo.ExtractIPFromRealIPHeader(trustPeer),
			header:    []string{"X-Real-IP", "203.0.113.7"},
			want:      "ip:203.0.113.7",
		},
		{
			name:      "extractor-ignored-by-default",
			extractor: echo.ExtractIPFromXFFHeader(trustPeer),
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
			var obs adaptertest.Observed
			lim := adaptertest.NewLimiter(t, rdb, per5, slidelimit.WithObserver(obs.Observe))
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
			if got := obs.Identities(); !slices.Equal(got, []string{tt.want}) {
				t.Errorf("identities = %q, want [%q]", got, tt.want)
			}
		})
	}
}

func TestNewCustomDenyHandler(t *testing.T) {
	t.Parallel()
	r := adaptertest.DenyHandler(t, func(lim *slidelimit.Limiter, denied func(slidelimit.Result, string)) adaptertest.Server {
		e := echo.New()
		e.Use(echolimit.NewWithConfig(lim, echolimit.Config{
			DenyHandler: func(c echo.Context, res slidelimit.Result) error {
				denied(res, c.Response().Header().Get("Retry-After"))
				return c.JSON(http.StatusServiceUnavailable, map[string]any{"limit": res.Limit.String(), "allowed": res.Allowed})
			},
		}))
		e.GET("/a", ok)
		return adaptertest.HTTPServer(e)
	})
	if body := strings.TrimSpace(string(r.Body)); body != `{"allowed":false,"limit":"1/10s"}` {
		t.Errorf("denied request's body = %q, want {\"allowed\":false,\"limit\":\"1/10s\"}", body)
	}
}

func TestNewPerRouteLimits(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	general := adaptertest.NewLimiter(t, rdb, per5)
	search := adaptertest.NewLimiter(t, rdb, slidelimit.Per(2, 10*time.Second))

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

func TestUndecidable(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	lim := adaptertest.NewLimiter(t, rdb, per5)
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
			var hook adaptertest.ErrorLog
			cfg := tt.config
			cfg.ErrorHook = func(_ echo.Context, err error) { hook.Hook(err) }
			e := echo.New()
			e.Use(echolimit.NewWithConfig(tt.lim, cfg))
			e.GET("/ping", ok)

			rec := get(t, e, "/ping")
			if body := strings.TrimSpace(rec.Body.String()); rec.Code != http.StatusInternalServerError || body != `{"message":"Internal Server Error"}` {
				t.Errorf("GET /ping = %d %q, want 500 {\"message\":\"Internal Server Error\"}", rec.Code, body)
			}
			errs := hook.Take()
			if len(errs) != 1 || tt.want != nil && !errors.Is(errs[0], tt.want) {
				t.Errorf("ErrorHook got %v, want one error wrapping %v", errs, tt.want)
			}
		})
	}
}

// Echo's own function types fit the Config fields.
var _ = echolimit.Config{Skipper: middleware.Skipper(nil), IdentifierExtractor: middleware.Extractor(nil)}

// TestMiddlewareAllocations pins what the middleware costs an admitted
// request beyond Echo's own: at most two allocations, Redis's round trip
// included (the decision's block and the identity). Echo wraps a route's
// middleware around its handler again on every request, which costs any
// middleware one allocation; the baseline is a middleware that does
// nothing.
func TestMiddlewareAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's sync.Pool drops items at random")
	}
	lim := adaptertest.NewLimiter(t, redistest.Client(t), slidelimit.PerMinute(slidelimit.MaxQuota))
	adaptertest.Allocations(t, echoOK(noopMiddleware), echoOK(echolimit.New(lim)))
}

// BenchmarkMiddleware serves GET / bare, behind a middleware that does
// nothing, and behind the limiter (every request admitted, against the test
// Redis): with -benchmem, the difference in allocs/op between "limited" and
// "noop" is what the limiter adds, Redis's round trip included. Echo wraps
// a route's middleware around its handler on every request, which costs
// any middleware one allocation.
func BenchmarkMiddleware(b *testing.B) {
	lim := adaptertest.NewLimiter(b, redistest.Client(b), slidelimit.PerMinute(slidelimit.MaxQuota))
	for _, tc := range []struct {
		name string
		h    http.Handler
	}{{"bare", echoOK()}, {"noop", echoOK(noopMiddleware)}, {"limited", echoOK(echolimit.New(lim))}} {
		b.Run(tc.name, func(b *testing.B) { adaptertest.Benchmark(b, tc.h) })
	}
}

// echoOK returns an Echo serving GET / through mw, answering 200.
func echoOK(mw ...echo.MiddlewareFunc) *echo.Echo {
	e := echo.New()
	e.GET("/", ok, mw...)
	return e
}

// noopMiddleware does nothing: Echo's own cost of a route middleware.
func noopMiddleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error { return next(c) }
}

func TestIdentifierExtractors(t *testing.T) {
	t.Parallel()
	apiKey := echolimit.KeyByHeader("x-api-key")
	empty := func(echo.Context) (string, error) { return "", nil }
	tests := []struct {
		name    string
		key     func(echo.Context) (string, error)
		stored  any // stored under "user" unless nil
		header  string
		want    string
		wantErr error
	}{
		{name: "ip", key: echolimit.KeyByIP, want: "ip:192.0.2.1"},
		{name: "header", key: apiKey, header: "k1", want: slidelimit.HeaderIdentity("X-API-Key", "k1")},
		{name: "header-missing", key: apiKey, wantErr: slidelimit.ErrInvalidKey},
		{name: "context-string", key: echolimit.KeyByContext("user"), stored: "u-1", want: "user:u-1"},
		{name: "context-int", key: echolimit.KeyByContext("user"), stored: 42, want: "user:42"},
		{name: "context-missing", key: echolimit.KeyByContext("user"), wantErr: slidelimit.ErrInvalidKey},
		{name: "context-bad-type", key: echolimit.KeyByContext("user"), stored: struct{}{}, wantErr: slidelimit.ErrInvalidKey},
		{name: "route", key: echolimit.KeyByRoute, want: "route:GET /items/:id"},
		{name: "join", key: echolimit.JoinKeys(apiKey, echolimit.KeyByIP), header: "k|1", want: slidelimit.HeaderIdentity("X-API-Key", "k|1") + "|ip:192.0.2.1"},
		{name: "join-error", key: echolimit.JoinKeys(apiKey, echolimit.KeyByIP), wantErr: slidelimit.ErrInvalidKey},
		{name: "join-none", key: echolimit.JoinKeys(), wantErr: slidelimit.ErrInvalidKey},
		{name: "first-header", key: echolimit.FirstKey(apiKey, echolimit.KeyByIP), header: "k1", want: slidelimit.HeaderIdentity("X-API-Key", "k1")},
		{name: "first-fallback", key: echolimit.FirstKey(apiKey, echolimit.KeyByIP), want: "ip:192.0.2.1"},
		{name: "first-all-empty", key: echolimit.FirstKey(empty), wantErr: slidelimit.ErrInvalidKey},
		{name: "first-none", key: echolimit.FirstKey(), wantErr: slidelimit.ErrInvalidKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got string
			var err error
			e := echo.New()
			e.GET("/items/:id", func(c echo.Context) error {
				if tt.stored != nil {
					c.Set("user", tt.stored)
				}
				got, err = tt.key(c)
				return nil
			})
			req := httptest.NewRequest(http.MethodGet, "/items/7", nil)
			if tt.header != "" {
				req.Header.Set("X-API-Key", tt.header)
			}
			e.ServeHTTP(httptest.NewRecorder(), req)
			if got != tt.want || !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Errorf("key = %q, %v; want %q, %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

// TestKeyByRouteInUse pins down what KeyByRoute documents: e.Use runs after
// routing and sees the route.
func TestKeyByRouteInUse(t *testing.T) {
	t.Parallel()
	e := echo.New()
	var got string
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			got, _ = echolimit.KeyByRoute(c)
			return next(c)
		}
	})
	e.GET("/items/:id", ok)
	e.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/items/7", nil))
	if want := "route:GET /items/:id"; got != want {
		t.Errorf("KeyByRoute in e.Use = %q, want %q", got, want)
	}
}
