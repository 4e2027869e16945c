package fiberlimit_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// TestMain gives the examples a Redis in REDIS_ADDR.
func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }

// per5 is the limit of most tests: 5 per 10 s.
var per5 = slidelimit.Per(5, 10*time.Second)

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

// observed records the identities a limiter was asked about, through
// slidelimit.WithObserver; the observer keeps them after the request.
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

func (h *hookErrors) hook(_ *fiber.Ctx, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.errs = append(h.errs, err)
}

func (h *hookErrors) all() []error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]error(nil), h.errs...)
}
