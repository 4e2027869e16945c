package fiberlimit_test

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/adaptertest"
	"github.com/slidelimit/slidelimit/core/redistest"
	fiberlimit "github.com/slidelimit/slidelimit/fiber"
	"github.com/valyala/fasthttp"
)

// TestMain gives the examples a Redis in REDIS_ADDR.
func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }

// per5 is the limit of most tests: 5 per 10 s.
var per5 = slidelimit.Per(5, 10*time.Second)

// newApp returns a Fiber app that does not print its banner.
func newApp(cfg ...fiber.Config) *fiber.App {
	c := fiber.Config{}
	if len(cfg) > 0 {
		c = cfg[0]
	}
	c.DisableStartupMessage = true
	return fiber.New(c)
}

// ok answers 200 "ok".
func ok(c *fiber.Ctx) error { return c.SendString("ok") }

// client sends requests to an app served on a real loopback listener, so
// that c.IP() sees a real peer address (app.Test's is always 0.0.0.0).
type client struct {
	t    *testing.T
	base string
	http *http.Client
}

// serve starts app on 127.0.0.1 and shuts it down when the test ends.
func serve(t *testing.T, app *fiber.App) *client {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("net.Listen() error = %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- app.Listener(ln) }()
	tr := &http.Transport{}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		if err := app.ShutdownWithTimeout(5 * time.Second); err != nil {
			t.Errorf("app.Shutdown() error = %v", err)
		}
		_ = ln.Close() // in case the shutdown came before the server accepted
		if err := <-done; err != nil {
			t.Errorf("app.Listener() error = %v", err)
		}
	})
	return &client{t: t, base: "http://" + ln.Addr().String(), http: &http.Client{Transport: tr, Timeout: 10 * time.Second}}
}

// response is what a test checks of an answer.
type response struct {
	status int
	header http.Header
	body   string
}

// get sends GET path with the given header fields, name then value.
func (c *client) get(path string, header ...string) response {
	c.t.Helper()
	req, err := http.NewRequestWithContext(c.t.Context(), http.MethodGet, c.base+path, nil)
	if err != nil {
		c.t.Fatalf("http.NewRequest(%s) error = %v", path, err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatalf("GET %s error = %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("GET %s: read body: %v", path, err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: string(body)}
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
			var obs adaptertest.Observed
			lim := adaptertest.NewLimiter(t, rdb, per5, slidelimit.WithObserver(obs.Observe))
			app := newApp(tt.app)
			app.Use(fiberlimit.New(lim, tt.config))
			app.Get("/ping", ok)
			c := serve(t, app)

			if r := c.get("/ping", "X-Forwarded-For", tt.xff); r.status != http.StatusOK {
				t.Fatalf("GET /ping: status = %d, want 200", r.status)
			}
			if got := obs.Identities(); !slices.Equal(got, []string{tt.want}) {
				t.Errorf("identities = %q, want [%q]", got, tt.want)
			}
		})
	}
}

func TestKeyCopiedOutOfFiberBuffers(t *testing.T) {
	t.Parallel()
	var obs adaptertest.Observed
	lim := adaptertest.NewLimiter(t, redistest.Client(t), slidelimit.Per(1000, time.Minute), slidelimit.WithObserver(obs.Observe))
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
	if got := obs.Identities(); !slices.Equal(got, want) {
		t.Errorf("identities kept after the requests = %q, want %q", got, want)
	}
}

func TestNewCustomLimitReached(t *testing.T) {
	t.Parallel()
	r := adaptertest.DenyHandler(t, func(lim *slidelimit.Limiter, denied func(slidelimit.Result, string)) adaptertest.Server {
		app := newApp()
		app.Use(fiberlimit.New(lim, fiberlimit.Config{
			LimitReached: func(c *fiber.Ctx, res slidelimit.Result) error {
				denied(res, c.GetRespHeader("Retry-After"))
				return c.Status(http.StatusServiceUnavailable).JSON(fiber.Map{"limit": res.Limit.String(), "allowed": res.Allowed})
			},
		}))
		app.Get("/a", ok)
		return fasthttpServer(app.Handler())
	})
	if body := string(r.Body); body != `{"allowed":false,"limit":"1/10s"}` {
		t.Errorf("denied request's body = %q, want {\"allowed\":false,\"limit\":\"1/10s\"}", body)
	}
}

func TestNewPerRouteLimits(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	general := adaptertest.NewLimiter(t, rdb, per5)
	search := adaptertest.NewLimiter(t, rdb, slidelimit.Per(2, 10*time.Second))

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
	lim := adaptertest.NewLimiter(t, rdb, per5)
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
			var hook adaptertest.ErrorLog
			cfg := tt.config
			cfg.ErrorHook = func(_ *fiber.Ctx, err error) { hook.Hook(err) }
			app := newApp()
			app.Use(fiberlimit.New(tt.lim, cfg))
			app.Get("/ping", ok)
			c := serve(t, app)

			r := c.get("/ping")
			if r.status != http.StatusInternalServerError || r.body != "Internal Server Error" {
				t.Errorf("GET /ping = %d %q, want 500 Internal Server Error", r.status, r.body)
			}
			errs := hook.Take()
			if len(errs) != 1 || tt.want != nil && !errors.Is(errs[0], tt.want) {
				t.Errorf("ErrorHook got %v, want one error wrapping %v", errs, tt.want)
			}
		})
	}
}

// TestMiddlewareAllocations pins what the middleware costs an admitted
// request beyond Fiber's own, served as Fiber's server serves it: at most
// adaptertest.MaxAddedAllocs allocations, Redis's round trip through
// go-redis included.
func TestMiddlewareAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's sync.Pool drops items at random")
	}
	lim := benchLimiter(t)
	perRequest := func(mw ...fiber.Handler) float64 {
		app := newApp()
		app.Get("/", append(mw, ok)...)
		get := fastGET(app)
		return testing.AllocsPerRun(200, func() {
			if code := get(); code != http.StatusOK {
				t.Fatalf("GET / = %d, want 200", code)
			}
		})
	}
	bare, limited := perRequest(), perRequest(fiberlimit.New(lim))
	t.Logf("allocations per admitted request: %.1f bare, %.1f behind the limiter", bare, limited)
	if limited-bare > adaptertest.MaxAddedAllocs+0.05 {
		t.Errorf("the middleware adds %.2f allocations to an admitted request, want at most %d", limited-bare, adaptertest.MaxAddedAllocs)
	}
}

// BenchmarkMiddleware serves GET / bare and behind the middleware (every
// request admitted, against the test Redis) through the app's
// fasthttp handler, as Fiber's server calls it: with -benchmem, the
// difference in allocs/op is what the limiter adds, go-redis included.
// app.Test would add its client's parsing of the response, whose cost
// grows with every header line the limiter sets; BenchmarkAppTest keeps
// that figure.
func BenchmarkMiddleware(b *testing.B) {
	benchApps(b, func(b *testing.B, app *fiber.App) {
		get := fastGET(app)
		b.ReportAllocs()
		for range b.N {
			if code := get(); code != http.StatusOK {
				b.Fatalf("GET / = %d, want 200", code)
			}
		}
	})
}

// fastGET returns a function that serves GET / from 192.0.2.1 through
// app's fasthttp handler, as Fiber's server calls it, on one request
// context it reuses, and returns the response's status.
func fastGET(app *fiber.App) func() int {
	serve := app.Handler()
	var req fasthttp.Request
	req.Header.SetMethod(http.MethodGet)
	req.SetRequestURI("/")
	ctx := new(fasthttp.RequestCtx)
	ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 41000}, nil)
	return func() int {
		ctx.Response.Reset()
		serve(ctx)
		return ctx.Response.StatusCode()
	}
}

// BenchmarkAppTest is BenchmarkMiddleware through app.Test, which also
// writes the request and parses the response with net/http.
func BenchmarkAppTest(b *testing.B) {
	benchApps(b, func(b *testing.B, app *fiber.App) {
		b.ReportAllocs()
		for range b.N {
			req := httptest.NewRequest(http.MethodGet, "/", nil)
			resp, err := app.Test(req, -1)
			if err != nil || resp.StatusCode != http.StatusOK {
				b.Fatalf("GET / = %v, %v, want 200", resp, err)
			}
			_ = resp.Body.Close()
		}
	})
}

// benchApps runs bench on an app serving GET / bare, as sub-benchmark
// "bare", and on one serving it behind the limiter (every request
// admitted, against the test Redis), as "limited".
func benchApps(b *testing.B, bench func(b *testing.B, app *fiber.App)) {
	lim := benchLimiter(b)
	for _, tc := range []struct {
		name string
		mw   []fiber.Handler
	}{{"bare", nil}, {"limited", []fiber.Handler{fiberlimit.New(lim)}}} {
		b.Run(tc.name, func(b *testing.B) {
			app := newApp()
			app.Get("/", append(tc.mw, ok)...)
			bench(b, app)
		})
	}
}

// benchLimiter returns a limiter whose quota no benchmark run reaches.
func benchLimiter(b testing.TB) *slidelimit.Limiter {
	return adaptertest.NewLimiter(b, redistest.Client(b), slidelimit.PerMinute(slidelimit.MaxQuota))
}

// serveScenario sends the requests of sc to c, from its loopback peer,
// and counts the admitted ones by client.
func serveScenario(t *testing.T, c *client, sc redistest.ClientIPScenario) map[string]int {
	t.Helper()
	admitted := map[string]int{}
	for _, r := range sc.Requests {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, c.base+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range r.Header {
			req.Header.Add(f[0], f[1])
		}
		resp, err := c.http.Do(req)
		if err != nil {
			t.Fatalf("GET / error = %v", err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			admitted[r.Client]++
		case http.StatusTooManyRequests:
		default:
			t.Fatalf("status %d, want 200 or 429", resp.StatusCode)
		}
	}
	return admitted
}

// TestFiberIPCaveats records why ClientIP is the documented key behind a
// proxy: with Fiber's own ProxyHeader (X-Real-IP, trusted proxy check and
// IP validation on), an IPv4-mapped X-Real-IP is keyed as the proxy, and
// behind a proxy that sends only X-Forwarded-For all clients share the
// proxy's quota or, as here, believes the X-Real-IP each client forges. It
// fails if Fiber ever gets these right, so that the caveats of KeyByFiberIP
// are updated.
func TestFiberIPCaveats(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	for _, sc := range redistest.ClientIPScenarios() {
		if sc.Name != "IPv4-mapped X-Real-IP" && sc.Name != "X-Forwarded-For-only proxy, several clients" {
			continue
		}
		t.Run(sc.Name, func(t *testing.T) {
			t.Parallel()
			fiberApp := newApp(fiber.Config{ProxyHeader: "X-Real-Ip", EnableTrustedProxyCheck: true, TrustedProxies: []string{"127.0.0.1"}, EnableIPValidation: true})
			fiberApp.Use(fiberlimit.New(adaptertest.NewLimiter(t, rdb, slidelimit.Per(redistest.ClientIPLimit, time.Minute)), fiberlimit.Config{KeyGenerator: fiberlimit.KeyByFiberIP}))
			fiberApp.Get("/", ok)
			theirs := serveScenario(t, serve(t, fiberApp), sc)
			t.Logf("%s, limit %d per client: KeyByFiberIP (ProxyHeader X-Real-IP) admitted %v; ClientIP.Key admits %v", sc.Name, redistest.ClientIPLimit, theirs, sc.Want)
			if maps.Equal(theirs, sc.Want) {
				t.Errorf("KeyByFiberIP admitted exactly %v: Fiber resolves this now; update the caveats of KeyByFiberIP", theirs)
			}
		})
	}
}

func TestKeyGenerators(t *testing.T) {
	t.Parallel()
	apiKey := fiberlimit.KeyByHeader("x-api-key")
	tests := []struct {
		name   string
		key    func(*fiber.Ctx) string
		locals any // stored under "user" unless nil
		header string
		want   string
	}{
		{name: "ip", key: fiberlimit.KeyByIP, want: "ip:0.0.0.0"},
		{name: "header", key: apiKey, header: "k1", want: slidelimit.HeaderIdentity("X-API-Key", "k1")},
		{name: "header-missing", key: apiKey, want: ""},
		{name: "locals-string", key: fiberlimit.KeyByLocals("user"), locals: "u-1", want: "user:u-1"},
		{name: "locals-int", key: fiberlimit.KeyByLocals("user"), locals: 42, want: "user:42"},
		{name: "locals-missing", key: fiberlimit.KeyByLocals("user"), want: ""},
		{name: "locals-bad-type", key: fiberlimit.KeyByLocals("user"), locals: struct{}{}, want: ""},
		{name: "route", key: fiberlimit.KeyByRoute, want: "route:GET /items/:id"},
		{name: "join", key: fiberlimit.JoinKeys(apiKey, fiberlimit.KeyByIP), header: "k|1", want: slidelimit.HeaderIdentity("X-API-Key", "k|1") + "|ip:0.0.0.0"},
		{name: "join-one-empty", key: fiberlimit.JoinKeys(apiKey, fiberlimit.KeyByIP), want: ""},
		{name: "join-none", key: fiberlimit.JoinKeys(), want: ""},
		{name: "first-header", key: fiberlimit.FirstKey(apiKey, fiberlimit.KeyByIP), header: "k1", want: slidelimit.HeaderIdentity("X-API-Key", "k1")},
		{name: "first-fallback", key: fiberlimit.FirstKey(apiKey, fiberlimit.KeyByIP), want: "ip:0.0.0.0"},
		{name: "first-none", key: fiberlimit.FirstKey(), want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			app := newApp()
			app.Get("/items/:id", func(c *fiber.Ctx) error {
				if tt.locals != nil {
					c.Locals("user", tt.locals)
				}
				return c.SendString(tt.key(c))
			})
			req := httptest.NewRequest(http.MethodGet, "/items/7", nil)
			if tt.header != "" {
				req.Header.Set("X-API-Key", tt.header)
			}
			if got := body(t, app, req); got != tt.want {
				t.Errorf("key = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestKeyByRouteInUse pins down what KeyByRoute documents: in app.Use, the
// route is the Use prefix, not the handler's route.
func TestKeyByRouteInUse(t *testing.T) {
	t.Parallel()
	app := newApp()
	var got string
	app.Use(func(c *fiber.Ctx) error {
		got = fiberlimit.KeyByRoute(c)
		return c.Next()
	})
	app.Get("/items/:id", ok)
	body(t, app, httptest.NewRequest(http.MethodGet, "/items/7", nil))
	if want := "route:GET /"; got != want {
		t.Errorf("KeyByRoute in app.Use = %q, want %q", got, want)
	}
}

// body returns the body app answers req with.
func body(t *testing.T, app *fiber.App, req *http.Request) string {
	t.Helper()
	resp, err := app.Test(req, -1)
	if err != nil {
		t.Fatalf("app.Test(%s) error = %v", req.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return string(b)
}
