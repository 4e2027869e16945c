package ginlimit_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
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
