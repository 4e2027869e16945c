package httplimit_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/adapter"
	"github.com/slidelimit/slidelimit/core/httplimit"
	"github.com/slidelimit/slidelimit/core/redistest"
)

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

// ok answers 200 "ok".
var ok = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	_, _ = io.WriteString(w, "ok")
})

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
	h := httplimit.New(lim, httplimit.WithDenyHandler(func(w http.ResponseWriter, _ *http.Request, res slidelimit.Result) {
		denied = res
		if w.Header().Get("Retry-After") == "" {
			t.Error("deny handler: Retry-After not set before it ran")
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "slow down")
	}))(ok)
	get(h, "/", "203.0.113.9:1")
	got := get(h, "/", "203.0.113.9:1")
	if got.Code != http.StatusServiceUnavailable || got.Body.String() != "slow down" {
		t.Errorf("GET / = %d %q, want 503 %q", got.Code, got.Body, "slow down")
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

	t.Run("WithLimiterFunc", func(t *testing.T) {
		mux := http.NewServeMux()
		mux.Handle("GET /search", ok)
		mux.Handle("GET /", ok)
		h := httplimit.New(general,
			httplimit.WithKey(httplimit.JoinKeys(httplimit.KeyByPattern(mux), httplimit.KeyByIP)),
			httplimit.WithLimiterFunc(func(r *http.Request) *slidelimit.Limiter {
				if r.URL.Path == "/search" {
					return search
				}
				return nil
			}),
		)(mux)
		got := statuses(2, func(int) *httptest.ResponseRecorder { return get(h, "/search", "203.0.113.9:1") })
		if want := codes(200, 429); !equal(got, want) {
			t.Errorf("GET /search = %v, want %v", got, want)
		}
		if p := get(h, "/search", "203.0.113.9:1").Header().Get("RateLimit-Policy"); p != `"search";q=1;w=10` {
			t.Errorf("GET /search RateLimit-Policy = %q, want %q", p, `"search";q=1;w=10`)
		}
		got = statuses(4, func(int) *httptest.ResponseRecorder { return get(h, "/items", "203.0.113.9:1") })
		if want := codes(200, 200, 200, 429); !equal(got, want) {
			t.Errorf("GET /items = %v, want %v", got, want)
		}
	})

	t.Run("middleware per pattern", func(t *testing.T) {
		mux := http.NewServeMux()
		keyed := httplimit.WithKey(httplimit.JoinKeys(httplimit.KeyByPattern(nil), httplimit.KeyByIP))
		mux.Handle("GET /a", httplimit.New(general, keyed)(ok))
		mux.Handle("GET /b", httplimit.New(general, keyed)(ok))
		for _, path := range []string{"/a", "/b"} {
			got := statuses(4, func(int) *httptest.ResponseRecorder { return get(mux, path, "203.0.113.8:1") })
			if want := codes(200, 200, 200, 429); !equal(got, want) {
				t.Errorf("GET %s = %v, want %v", path, got, want)
			}
		}
	})
}

func TestNewRefundKeepsFlusher(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, redistest.Client(t), slidelimit.Per(2, 10*time.Second))
	next := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "part")
		if err := http.NewResponseController(w).Flush(); err != nil {
			t.Errorf("Flush through the middleware: %v", err)
		}
	})
	h := httplimit.New(lim, httplimit.WithRefundSuccessful())(next)
	got := get(h, "/", "203.0.113.9:1")
	if !got.Flushed || got.Body.String() != "part" {
		t.Errorf("GET / flushed %v, body %q, want true, %q", got.Flushed, got.Body, "part")
	}
}

// TestNewDenialBody checks the problem+json body of a denial; its status
// and header fields are the conformance suite's.
func TestNewDenialBody(t *testing.T) {
	t.Parallel()
	h := httplimit.New(newLimiter(t, redistest.Client(t), slidelimit.Per(5, 10*time.Second)))(ok)
	for range 5 {
		get(h, "/", "203.0.113.9:1234")
	}
	got := get(h, "/", "203.0.113.9:1234")
	if got.Code != http.StatusTooManyRequests || got.Header().Get("Content-Type") != httplimit.ContentTypeProblem {
		t.Fatalf("GET / = %d %s, want 429 %s", got.Code, got.Header().Get("Content-Type"), httplimit.ContentTypeProblem)
	}
	var p httplimit.Problem
	if err := json.Unmarshal(got.Body.Bytes(), &p); err != nil {
		t.Fatalf("GET / body %q: %v", got.Body, err)
	}
	want := httplimit.Problem{
		Type:       httplimit.ProblemTypeQuotaExceeded,
		Title:      "Too Many Requests",
		Status:     http.StatusTooManyRequests,
		Detail:     "rate limit 5/10s exceeded; retry in 10s",
		Policy:     "5/10s",
		RetryAfter: 10,
	}
	if p != want {
		t.Errorf("GET / problem = %+v, want %+v", p, want)
	}
}

// TestNewNoLimiter checks that a request with no limiter goes to the
// error handler with an error wrapping adapter.ErrNoLimiter.
func TestNewNoLimiter(t *testing.T) {
	var handled error
	h := httplimit.New(nil, httplimit.WithErrorHook(func(*http.Request, error) {}),
		httplimit.WithErrorHandler(func(w http.ResponseWriter, _ *http.Request, err error) {
			handled = err
			w.WriteHeader(http.StatusTeapot)
		}))(ok)
	if got := get(h, "/", "203.0.113.9:1"); got.Code != http.StatusTeapot || !errors.Is(handled, adapter.ErrNoLimiter) {
		t.Errorf("GET / with no limiter = %d, handler got %v, want 418 and ErrNoLimiter", got.Code, handled)
	}
}
