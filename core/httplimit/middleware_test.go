package httplimit_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"reflect"
	"slices"
	"testing"
	"time"

	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/adapter"
	"github.com/slidelimit/slidelimit/core/adaptertest"
	"github.com/slidelimit/slidelimit/core/httplimit"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// The conformance suite (TestConformance) proves what every adapter must
// do; the tests here prove what is net/http's own.

// ok answers 200 "ok".
var ok = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	_, _ = io.WriteString(w, "ok")
})

// client is the peer of the requests sent here.
var client = netip.MustParseAddr("203.0.113.9")

func TestNewDenyHandler(t *testing.T) {
	t.Parallel()
	adaptertest.DenyHandler(t, func(lim *slidelimit.Limiter, denied func(slidelimit.Result, string)) adaptertest.Server {
		return adaptertest.HTTPServer(httplimit.New(lim, httplimit.WithDenyHandler(func(w http.ResponseWriter, _ *http.Request, res slidelimit.Result) {
			denied(res, w.Header().Get("Retry-After"))
			w.WriteHeader(http.StatusServiceUnavailable)
		}))(ok))
	})
}

func TestNewPerRoute(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	general := adaptertest.NewLimiter(t, rdb, slidelimit.Per(3, 10*time.Second))
	search := adaptertest.NewLimiter(t, rdb, slidelimit.Per(1, 10*time.Second).Named("search"))
	send := func(h http.Handler, path string, n int) []int {
		return adaptertest.Send(t, adaptertest.HTTPServer(h), n, adaptertest.Request{Peer: client, Path: path})
	}

	t.Run("WithLimiterFunc and KeyByPattern of the mux", func(t *testing.T) {
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
		if got, want := send(h, "/search", 2), adaptertest.Statuses(1, 200, 429); !slices.Equal(got, want) {
			t.Errorf("GET /search = %v, want %v", got, want)
		}
		// Every path of the pattern "GET /" shares one quota.
		if got, want := append(send(h, "/items", 2), send(h, "/other", 2)...), adaptertest.Statuses(3, 200, 429); !slices.Equal(got, want) {
			t.Errorf("GET /items, /other = %v, want %v", got, want)
		}
	})

	t.Run("middleware per pattern", func(t *testing.T) {
		mux := http.NewServeMux()
		keyed := httplimit.WithKey(httplimit.JoinKeys(httplimit.KeyByPattern(nil), httplimit.KeyByIP))
		mux.Handle("GET /a", httplimit.New(general, keyed)(ok))
		mux.Handle("GET /b", httplimit.New(general, keyed)(ok))
		for _, path := range []string{"/a", "/b"} {
			if got, want := send(mux, path, 4), adaptertest.Statuses(3, 200, 429); !slices.Equal(got, want) {
				t.Errorf("GET %s = %v, want %v", path, got, want)
			}
		}
	})
}

func TestNewRefundKeepsFlusher(t *testing.T) {
	t.Parallel()
	lim := adaptertest.NewLimiter(t, redistest.Client(t), slidelimit.Per(2, 10*time.Second))
	next := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "part")
		if err := http.NewResponseController(w).Flush(); err != nil {
			t.Errorf("Flush through the middleware: %v", err)
		}
	})
	rec := httptest.NewRecorder()
	httplimit.New(lim, httplimit.WithRefundSuccessful())(next).ServeHTTP(rec, adaptertest.Request{Peer: client, Path: "/"}.HTTPRequest(t))
	if !rec.Flushed || rec.Body.String() != "part" {
		t.Errorf("GET / flushed %v, body %q, want true, %q", rec.Flushed, rec.Body, "part")
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
	if got := adaptertest.Send(t, adaptertest.HTTPServer(h), 1, adaptertest.Request{Peer: client, Path: "/"}); got[0] != http.StatusTeapot || !errors.Is(handled, adapter.ErrNoLimiter) {
		t.Errorf("GET / with no limiter = %v, handler got %v, want 418 and ErrNoLimiter", got, handled)
	}
}

// TestOptionIsThisPackages keeps Option a type of this package rather than
// an alias of package adapter's generic one, so that go doc lists it here
// with its With… functions.
func TestOptionIsThisPackages(t *testing.T) {
	typ := reflect.TypeFor[httplimit.Option]()
	if got, want := typ.PkgPath()+"."+typ.Name(), "github.com/slidelimit/slidelimit/core/httplimit.Option"; got != want {
		t.Errorf("httplimit.Option is %s, want %s", got, want)
	}
}
