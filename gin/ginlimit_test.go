package ginlimit_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/httplimit"
	"github.com/slidelimit/slidelimit/core/redistest"
	ginlimit "github.com/slidelimit/slidelimit/gin"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode)
	os.Exit(m.Run())
}

// prefix returns redistest.Prefix(t) cut to the 64 bytes a key prefix may
// have: long subtest names exceed it. The random tail is kept.
func prefix(t *testing.T) string {
	t.Helper()
	p := redistest.Prefix(t)
	if len(p) > 64 {
		p = p[:40] + p[len(p)-24:]
	}
	return p
}

// newLimiter returns a limiter on rdb with a prefix of the test's own and a
// clock frozen at the test's start, so that every header value is exact.
func newLimiter(t *testing.T, rdb redis.Scripter, limit slidelimit.Limit, opts ...slidelimit.Option) *slidelimit.Limiter {
	t.Helper()
	now := time.Now()
	opts = append([]slidelimit.Option{
		slidelimit.WithPrefix(prefix(t)),
		slidelimit.WithClock(func() time.Time { return now }),
	}, opts...)
	lim, err := slidelimit.New(rdb, limit, opts...)
	if err != nil {
		t.Fatalf("slidelimit.New: %v", err)
	}
	return lim
}

// engine returns a gin.Engine serving GET / through mw, answering 200 "ok".
func engine(mw gin.HandlerFunc) *gin.Engine {
	r := gin.New()
	r.GET("/", mw, func(c *gin.Context) { c.String(http.StatusOK, "ok") })
	return r
}

// get serves GET path from remote through h; header holds name, value pairs.
func get(h http.Handler, path, remote string, header ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, path, nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Add(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// statuses serves n requests and returns their status codes.
func statuses(n int, serve func(i int) *httptest.ResponseRecorder) []int {
	got := make([]int, n)
	for i := range got {
		got[i] = serve(i).Code
	}
	return got
}

func codes(c ...int) []int { return c }

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// recordErrors returns an error hook that keeps what it gets.
func recordErrors() (func(*gin.Context, error), func() []error) {
	var mu sync.Mutex
	var errs []error
	return func(_ *gin.Context, err error) {
			mu.Lock()
			defer mu.Unlock()
			errs = append(errs, err)
		}, func() []error {
			mu.Lock()
			defer mu.Unlock()
			return append([]error(nil), errs...)
		}
}

var rateLimitT = regexp.MustCompile(`;t=(\d+)`)

func TestNewFiveThenDenied(t *testing.T) {
	t.Parallel()
	t.Run("standalone", func(t *testing.T) {
		t.Parallel()
		testFiveThenDenied(t, redistest.Client(t))
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		testFiveThenDenied(t, redistest.ClusterClient(t))
	})
}

func testFiveThenDenied(t *testing.T, rdb redis.Scripter) {
	lim := newLimiter(t, rdb, slidelimit.Per(5, 10*time.Second))
	var served atomic.Int32
	r := gin.New()
	r.GET("/", ginlimit.New(lim), func(c *gin.Context) {
		served.Add(1)
		c.String(http.StatusOK, "ok")
	})

	type want struct {
		status int
		header map[string]string
	}
	allowed := func(remaining int) want {
		r := strconv.Itoa(remaining)
		return want{http.StatusOK, map[string]string{
			"RateLimit-Policy":      `"5/10s";q=5;w=10`,
			"RateLimit":             `"5/10s";r=` + r + `;t=10`,
			"X-RateLimit-Limit":     "5",
			"X-RateLimit-Remaining": r,
			"X-RateLimit-Reset":     "10",
			"Retry-After":           "",
		}}
	}
	wants := []want{
		allowed(4), allowed(3), allowed(2), allowed(1), allowed(0),
		{http.StatusTooManyRequests, map[string]string{
			"RateLimit-Policy":      `"5/10s";q=5;w=10`,
			"RateLimit":             `"5/10s";r=0;t=10`,
			"X-RateLimit-Limit":     "5",
			"X-RateLimit-Remaining": "0",
			"X-RateLimit-Reset":     "10",
			"Retry-After":           "10",
			"Content-Type":          httplimit.ContentTypeProblem,
		}},
	}
	for i, w := range wants {
		t.Run("request "+strconv.Itoa(i+1), func(t *testing.T) {
			got := get(r, "/", "203.0.113.9:1234")
			if got.Code != w.status {
				t.Fatalf("GET / = %d, want %d", got.Code, w.status)
			}
			for name, value := range w.header {
				if v := got.Header().Get(name); v != value {
					t.Errorf("GET / header %s = %q, want %q", name, v, value)
				}
			}
			if got.Code == http.StatusOK {
				return
			}
			m := rateLimitT.FindStringSubmatch(got.Header().Get("RateLimit"))
			if m == nil || m[1] != got.Header().Get("Retry-After") {
				t.Errorf("GET / RateLimit %q t = %v, want Retry-After %q", got.Header().Get("RateLimit"), m, got.Header().Get("Retry-After"))
			}
			var p httplimit.Problem
			if err := json.Unmarshal(got.Body.Bytes(), &p); err != nil {
				t.Fatalf("GET / body %q: %v", got.Body, err)
			}
			wantP := httplimit.Problem{
				Type:       httplimit.ProblemTypeQuotaExceeded,
				Title:      "Too Many Requests",
				Status:     http.StatusTooManyRequests,
				Detail:     "rate limit 5/10s exceeded; retry in 10s",
				Policy:     "5/10s",
				RetryAfter: 10,
			}
			if p != wantP {
				t.Errorf("GET / problem = %+v, want %+v", p, wantP)
			}
		})
	}
	if n := served.Load(); n != 5 {
		t.Errorf("handler ran %d times, want 5: a denial must abort the chain", n)
	}
}

func TestNewKeyIsolation(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, redistest.Client(t), slidelimit.Per(2, 10*time.Second))
	h := engine(ginlimit.New(lim))
	for _, remote := range []string{"203.0.113.1:1", "203.0.113.2:1", "[2001:db8:1::1]:1"} {
		got := statuses(3, func(int) *httptest.ResponseRecorder { return get(h, "/", remote) })
		if want := codes(200, 200, 429); !equal(got, want) {
			t.Errorf("GET / from %s = %v, want %v", remote, got, want)
		}
	}
	if got := get(h, "/", "[2001:db8:1::2]:1").Code; got != http.StatusTooManyRequests {
		t.Errorf("GET / from another address of the /64 = %d, want 429", got)
	}
}

func TestNewForwardedFor(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	spoof := func(i int) string { return "198.51.100." + strconv.Itoa(i) }
	tests := []struct {
		name    string
		trusted []string // nil: Gin's default, trust every proxy
		key     ginlimit.KeyFunc
		remote  string
		want    []int
	}{
		{"default key on a trust-all engine ignores a spoofed header", nil, nil, "203.0.113.9:1", codes(200, 200, 429, 429)},
		{"default key ignores a trusted proxy too", []string{"10.0.0.0/8"}, nil, "10.0.0.1:1", codes(200, 200, 429, 429)},
		{"KeyByClientIP, untrusted peer cannot spoof", []string{"10.0.0.0/8"}, ginlimit.KeyByGinClientIP, "203.0.113.9:1", codes(200, 200, 429, 429)},
		{"KeyByClientIP, trusted proxy forwards distinct clients", []string{"10.0.0.0/8"}, ginlimit.KeyByGinClientIP, "10.0.0.1:1", codes(200, 200, 200, 200)},
		{"KeyByGinClientIP on a trust-all engine believes anyone", nil, ginlimit.KeyByGinClientIP, "203.0.113.9:1", codes(200, 200, 200, 200)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			lim := newLimiter(t, rdb, slidelimit.Per(2, 10*time.Second))
			h := engine(ginlimit.New(lim, ginlimit.WithKey(tt.key)))
			if tt.trusted != nil {
				if err := h.SetTrustedProxies(tt.trusted); err != nil {
					t.Fatal(err)
				}
			}
			got := statuses(len(tt.want), func(i int) *httptest.ResponseRecorder {
				return get(h, "/", tt.remote, "X-Forwarded-For", spoof(i))
			})
			if !equal(got, tt.want) {
				t.Errorf("GET / from %s = %v, want %v", tt.remote, got, tt.want)
			}
		})
	}
}

func TestNewSkip(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, redistest.Client(t), slidelimit.Per(1, 10*time.Second))
	r := gin.New()
	r.Use(ginlimit.New(lim, ginlimit.WithSkip(func(c *gin.Context) bool { return c.FullPath() == "/healthz" })))
	r.GET("/healthz", func(c *gin.Context) { c.String(http.StatusOK, "ok") })
	r.GET("/", func(c *gin.Context) { c.String(http.StatusOK, "ok") })
	for i := range 3 {
		got := get(r, "/healthz", "203.0.113.9:1")
		if got.Code != http.StatusOK || got.Header().Get("RateLimit") != "" {
			t.Errorf("GET /healthz #%d = %d with RateLimit %q, want 200 without", i+1, got.Code, got.Header().Get("RateLimit"))
		}
	}
	got := statuses(2, func(int) *httptest.ResponseRecorder { return get(r, "/", "203.0.113.9:1") })
	if want := codes(200, 429); !equal(got, want) {
		t.Errorf("GET / = %v, want %v", got, want)
	}
}

func TestNewDenyHandler(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, redistest.Client(t), slidelimit.Per(1, 10*time.Second))
	var denied slidelimit.Result
	h := engine(ginlimit.New(lim, ginlimit.WithDenyHandler(func(c *gin.Context, res slidelimit.Result) {
		denied = res
		if c.Writer.Header().Get("Retry-After") == "" {
			t.Error("deny handler: Retry-After not set before it ran")
		}
		c.JSON(http.StatusTooManyRequests, gin.H{"error": "slow down"})
	})))
	get(h, "/", "203.0.113.9:1")
	got := get(h, "/", "203.0.113.9:1")
	if got.Code != http.StatusTooManyRequests || got.Body.String() != `{"error":"slow down"}` {
		t.Errorf("GET / = %d %q, want 429 %q", got.Code, got.Body, `{"error":"slow down"}`)
	}
	if denied.Allowed || denied.Limit.String() != "1/10s" {
		t.Errorf("deny handler got %+v, want a denial by 1/10s", denied)
	}
}

func TestNewPerRoute(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	general := newLimiter(t, rdb, slidelimit.Per(3, 10*time.Second))
	search := newLimiter(t, rdb, slidelimit.Per(1, 10*time.Second).Named("search"))

	r := gin.New()
	r.Use(ginlimit.New(general,
		ginlimit.WithKey(ginlimit.JoinKeys(ginlimit.KeyByRoute, ginlimit.KeyByIP)),
		ginlimit.WithLimiterFunc(func(c *gin.Context) *slidelimit.Limiter {
			if c.FullPath() == "/search" {
				return search
			}
			return nil
		}),
	))
	ok := func(c *gin.Context) { c.String(http.StatusOK, "ok") }
	r.GET("/search", ok)
	r.GET("/items/:id", ok)

	got := statuses(2, func(int) *httptest.ResponseRecorder { return get(r, "/search", "203.0.113.9:1") })
	if want := codes(200, 429); !equal(got, want) {
		t.Errorf("GET /search = %v, want %v", got, want)
	}
	if p := get(r, "/search", "203.0.113.9:1").Header().Get("RateLimit-Policy"); p != `"search";q=1;w=10` {
		t.Errorf("GET /search RateLimit-Policy = %q, want %q", p, `"search";q=1;w=10`)
	}
	// All /items/:id share the route's quota.
	got = statuses(4, func(i int) *httptest.ResponseRecorder { return get(r, "/items/"+strconv.Itoa(i), "203.0.113.9:1") })
	if want := codes(200, 200, 200, 429); !equal(got, want) {
		t.Errorf("GET /items/:id = %v, want %v", got, want)
	}
}

func TestNewMultiLimit(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, redistest.Client(t), slidelimit.Per(5, 10*time.Second), slidelimit.WithLimits(slidelimit.PerMinute(3)))
	h := engine(ginlimit.New(lim))
	wantRL := []string{
		`"5/10s";r=4;t=10, "3/1m";r=2;t=60`,
		`"5/10s";r=3;t=10, "3/1m";r=1;t=60`,
		`"5/10s";r=2;t=10, "3/1m";r=0;t=60`,
		`"5/10s";r=2;t=10, "3/1m";r=0;t=60`,
	}
	wantStatus := codes(200, 200, 200, 429)
	for i := range wantRL {
		got := get(h, "/", "203.0.113.9:1")
		if got.Code != wantStatus[i] {
			t.Errorf("GET / #%d = %d, want %d", i+1, got.Code, wantStatus[i])
		}
		if rl := got.Header().Get("RateLimit"); rl != wantRL[i] {
			t.Errorf("GET / #%d RateLimit = %q, want %q", i+1, rl, wantRL[i])
		}
		if l := got.Header().Get("X-RateLimit-Limit"); l != "3" {
			t.Errorf("GET / #%d X-RateLimit-Limit = %q, want the tighter limit's 3", i+1, l)
		}
	}
}

func TestNewRefund(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	tests := []struct {
		name   string
		opts   []ginlimit.Option
		status int
		want   []int
	}{
		{"failures count by default", nil, 500, codes(500, 500, 429)},
		{"failures refunded", []ginlimit.Option{ginlimit.WithRefundFailed()}, 500, codes(500, 500, 500, 500)},
		{"successes still count", []ginlimit.Option{ginlimit.WithRefundFailed()}, 200, codes(200, 200, 429)},
		{"successes refunded", []ginlimit.Option{ginlimit.WithRefundSuccessful()}, 200, codes(200, 200, 200, 200)},
		{"failures count when successes are refunded", []ginlimit.Option{ginlimit.WithRefundSuccessful()}, 401, codes(401, 401, 429)},
		{"404 not failed by a custom rule", []ginlimit.Option{ginlimit.WithRefundFailed(), ginlimit.WithFailedStatus(func(s int) bool { return s >= 500 })}, 404, codes(404, 404, 429)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			lim := newLimiter(t, rdb, slidelimit.Per(2, 10*time.Second))
			r := gin.New()
			r.GET("/", ginlimit.New(lim, tt.opts...), func(c *gin.Context) { c.Status(tt.status) })
			got := statuses(len(tt.want), func(int) *httptest.ResponseRecorder { return get(r, "/", "203.0.113.9:1") })
			if !equal(got, tt.want) {
				t.Errorf("GET / = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestNewCost(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, redistest.Client(t), slidelimit.Per(5, 10*time.Second))
	hook, errs := recordErrors()
	h := engine(ginlimit.New(lim, ginlimit.WithErrorHook(hook), ginlimit.WithCost(func(c *gin.Context) int {
		n, _ := strconv.Atoi(c.Query("cost"))
		return n
	})))
	for _, step := range []struct {
		cost      string
		status    int
		remaining string
	}{
		{"3", 200, "2"},
		{"3", 429, "2"},
		{"2", 200, "0"},
		{"6", 500, ""},
	} {
		got := get(h, "/?cost="+step.cost, "203.0.113.9:1")
		if got.Code != step.status || got.Header().Get("X-RateLimit-Remaining") != step.remaining {
			t.Errorf("GET /?cost=%s = %d remaining %q, want %d remaining %q", step.cost, got.Code, got.Header().Get("X-RateLimit-Remaining"), step.status, step.remaining)
		}
	}
	if e := errs(); len(e) != 1 || !errors.Is(e[0], slidelimit.ErrInvalidCost) {
		t.Errorf("errors = %v, want one wrapping ErrInvalidCost", e)
	}
}

func TestNewKeyError(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, redistest.Client(t), slidelimit.Per(5, 10*time.Second))
	hook, errs := recordErrors()
	h := engine(ginlimit.New(lim, ginlimit.WithErrorHook(hook), ginlimit.WithKey(ginlimit.KeyByHeader("X-API-Key"))))
	if got := get(h, "/", "203.0.113.9:1"); got.Code != http.StatusInternalServerError || got.Header().Get("RateLimit") != "" {
		t.Errorf("GET / without key = %d with RateLimit %q, want 500 without", got.Code, got.Header().Get("RateLimit"))
	}
	if e := errs(); len(e) != 1 || !errors.Is(e[0], slidelimit.ErrInvalidKey) {
		t.Errorf("errors = %v, want one wrapping ErrInvalidKey", e)
	}
	if got := get(h, "/", "203.0.113.9:1", "X-API-Key", "k1"); got.Code != http.StatusOK {
		t.Errorf("GET / with key = %d, want 200", got.Code)
	}

	var handled error
	h = engine(ginlimit.New(nil, ginlimit.WithErrorHook(hook), ginlimit.WithErrorHandler(func(c *gin.Context, err error) {
		handled = err
		c.Status(http.StatusTeapot)
	})))
	if got := get(h, "/", "203.0.113.9:1"); got.Code != http.StatusTeapot || handled == nil {
		t.Errorf("GET / with no limiter = %d, handler got %v, want 418 and an error", got.Code, handled)
	}
}

func TestNewHeaderSelection(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, redistest.Client(t), slidelimit.Per(1, 10*time.Second))
	h := engine(ginlimit.New(lim, ginlimit.WithHeaders(slidelimit.Headers{Omit: slidelimit.HeaderRateLimit})))
	get(h, "/", "203.0.113.9:1")
	got := get(h, "/", "203.0.113.9:1")
	for name, want := range map[string]string{"RateLimit": "", "RateLimit-Policy": "", "X-RateLimit-Remaining": "0", "Retry-After": "10"} {
		if v := got.Header().Get(name); v != want {
			t.Errorf("denial header %s = %q, want %q", name, v, want)
		}
	}
}

func TestNewRedisDown(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		policy     slidelimit.FailurePolicy
		status     int
		retryAfter string
		body       string
	}{
		{"fail-open", slidelimit.FailOpen, http.StatusOK, "", "ok"},
		{"fail-closed", slidelimit.FailClosed, http.StatusServiceUnavailable, "1", "Service Unavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
			t.Cleanup(func() { _ = rdb.Close() })
			lim, err := slidelimit.New(rdb, slidelimit.Per(100, 10*time.Second),
				slidelimit.WithPrefix(prefix(t)), slidelimit.WithFailurePolicy(tt.policy))
			if err != nil {
				t.Fatal(err)
			}
			hook, errs := recordErrors()
			h := engine(ginlimit.New(lim, ginlimit.WithErrorHook(hook)))

			if got := get(h, "/", "203.0.113.9:1"); got.Code != http.StatusOK || got.Header().Get("RateLimit") == "" {
				t.Fatalf("GET / with Redis up = %d with RateLimit %q, want 200 with", got.Code, got.Header().Get("RateLimit"))
			}

			srv.Stop()
			got := get(h, "/", "203.0.113.9:1")
			if got.Code != tt.status || got.Body.String() != tt.body {
				t.Errorf("GET / with Redis down = %d %q, want %d %q", got.Code, got.Body, tt.status, tt.body)
			}
			if v := got.Header().Get("Retry-After"); v != tt.retryAfter {
				t.Errorf("GET / with Redis down: Retry-After = %q, want %q", v, tt.retryAfter)
			}
			for _, name := range []string{"RateLimit", "RateLimit-Policy", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
				if v := got.Header().Get(name); v != "" {
					t.Errorf("GET / with Redis down: %s = %q, want none", name, v)
				}
			}
			if e := errs(); len(e) != 1 || !errors.Is(e[0], slidelimit.ErrUnavailable) {
				t.Errorf("errors with Redis down = %v, want one wrapping ErrUnavailable", e)
			}

			srv.Restart()
			deadline := time.Now().Add(10 * time.Second)
			for {
				got := get(h, "/", "203.0.113.9:1")
				if got.Code == http.StatusOK && got.Header().Get("RateLimit") != "" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("GET / after Redis came back = %d with RateLimit %q, want 200 with", got.Code, got.Header().Get("RateLimit"))
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}
