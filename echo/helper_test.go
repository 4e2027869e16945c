package echolimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// TestMain gives the examples a Redis in REDIS_ADDR.
func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }

// per5 is the limit of most tests: 5 per 10 s.
var per5 = slidelimit.Per(5, 10*time.Second)

// peer is the client address of test requests, unless a test sets another.
const peer = "192.0.2.1:41000"

// newLimiter returns a limiter on rdb with a key prefix of the test's own.
func newLimiter(t *testing.T, rdb redis.Scripter, limit slidelimit.Limit, opts ...slidelimit.Option) *slidelimit.Limiter {
	t.Helper()
	opts = append([]slidelimit.Option{slidelimit.WithPrefix(redistest.Prefix(t))}, opts...)
	lim, err := slidelimit.New(rdb, limit, opts...)
	if err != nil {
		t.Fatalf("slidelimit.New(%v) error = %v", limit, err)
	}
	return lim
}

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

// observed records the identities a limiter was asked about, through
// slidelimit.WithObserver.
type observed struct {
	mu  sync.Mutex
	ids []string
}

func (o *observed) observe(_ context.Context, ob slidelimit.Observation) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ids = append(o.ids, ob.Identity)
}

func (o *observed) identities() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.ids...)
}

// hookErrors records the errors an ErrorHook receives.
type hookErrors struct {
	mu   sync.Mutex
	errs []error
}

func (h *hookErrors) hook(_ echo.Context, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.errs = append(h.errs, err)
}

func (h *hookErrors) all() []error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]error(nil), h.errs...)
}
