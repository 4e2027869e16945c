package integration

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/gofiber/fiber/v2"
	"github.com/labstack/echo/v4"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/httplimit"
	"github.com/slidelimit/slidelimit/core/redistest"
	echolimit "github.com/slidelimit/slidelimit/echo"
	fiberlimit "github.com/slidelimit/slidelimit/fiber"
	ginlimit "github.com/slidelimit/slidelimit/gin"
)

func init() {
	// Set once, before any test runs: gin.SetMode writes a global.
	gin.SetMode(gin.ReleaseMode)
}

// apiKeyHeader is the header every server in TestAdaptersShareOneLimit keys
// requests by.
const apiKeyHeader = "X-API-Key"

// TestAdaptersShareOneLimit starts a Gin, an Echo, a Fiber and a net/http
// server on loopback listeners, each with its own limiter of 5 per 10 s
// under one key prefix, all keyed by the X-API-Key header, as replicas of
// one service written in different frameworks would be. Twenty concurrent
// requests with one API key, five to each server, get exactly five 200s and
// fifteen 429s, and one more request to each server is denied: every
// adapter builds the same identity, so they share one key.
func TestAdaptersShareOneLimit(t *testing.T) {
	limit := slidelimit.Per(5, 10*time.Second)
	const perServer = 5
	for _, be := range backends() {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			rdb := be.client(t)
			prefix := redistest.Prefix(t)
			// One limiter per server, built alike, as separate processes
			// would build theirs. A generous timeout, and an observer that
			// counts failures: a fail-open admit is not what is tested.
			var failures atomic.Int64
			observe := slidelimit.WithObserver(func(_ context.Context, o slidelimit.Observation) {
				if o.Err != nil {
					failures.Add(1)
				}
			})
			serverLimiter := func() *slidelimit.Limiter {
				return newLimiter(t, rdb, prefix, limit, slidelimit.WithTimeout(10*time.Second), observe)
			}
			servers := []struct {
				name string
				url  string
			}{
				{"gin", startGin(t, serverLimiter())},
				{"echo", startEcho(t, serverLimiter())},
				{"fiber", startFiber(t, serverLimiter())},
				{"net/http", startNetHTTP(t, serverLimiter())},
			}

			type reply struct {
				server string
				status int
				header http.Header
				err    error
			}
			replies := make(chan reply, len(servers)*perServer)
			client := &http.Client{Timeout: 10 * time.Second}
			start := make(chan struct{})
			var wg sync.WaitGroup
			for _, s := range servers {
				for range perServer {
					wg.Add(1)
					go func() {
						defer wg.Done()
						req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, s.url+"/ping", nil)
						if err != nil {
							replies <- reply{server: s.name, err: err}
							return
						}
						req.Header.Set(apiKeyHeader, "fleet-key")
						<-start
						resp, err := client.Do(req)
						if err != nil {
							replies <- reply{server: s.name, err: err}
							return
						}
						resp.Body.Close()
						replies <- reply{server: s.name, status: resp.StatusCode, header: resp.Header}
					}()
				}
			}
			close(start)
			wg.Wait()
			close(replies)

			counts := map[int]int{}
			perServerOK := map[string]int{}
			for r := range replies {
				if r.err != nil {
					t.Errorf("GET %s /ping: %v", r.server, r.err)
					continue
				}
				counts[r.status]++
				switch r.status {
				case http.StatusOK:
					perServerOK[r.server]++
				case http.StatusTooManyRequests:
					if got := r.header.Get(slidelimit.FieldRetryAfter); got == "" {
						t.Errorf("%s: 429 without Retry-After", r.server)
					}
				default:
					t.Errorf("%s: status %d, want 200 or 429", r.server, r.status)
				}
				if got, want := r.header.Get(slidelimit.FieldRateLimitPolicy), `"5/10s";q=5;w=10`; got != want {
					t.Errorf("%s: %s = %q, want %q", r.server, slidelimit.FieldRateLimitPolicy, got, want)
				}
			}
			if n := failures.Load(); n > 0 {
				t.Fatalf("%d limiter calls failed and were decided by the failure policy", n)
			}
			total := len(servers) * perServer
			if counts[http.StatusOK] != limit.Quota || counts[http.StatusTooManyRequests] != total-limit.Quota {
				t.Errorf("statuses across %d servers = %v, want %d×200 and %d×429", len(servers), counts, limit.Quota, total-limit.Quota)
			}
			t.Logf("200s per server: %v", perServerOK)

			// Every server, whether it admitted any request or not, sees
			// the quota spent.
			for _, s := range servers {
				req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, s.url+"/ping", nil)
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set(apiKeyHeader, "fleet-key")
				resp, err := client.Do(req)
				if err != nil {
					t.Fatalf("GET %s /ping: %v", s.name, err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusTooManyRequests {
					t.Errorf("GET %s /ping after the quota was spent = %d, want 429", s.name, resp.StatusCode)
				}
			}
		})
	}
}

// pong is the body of GET /ping.
const pong = "pong"

func startGin(t *testing.T, lim *slidelimit.Limiter) string {
	t.Helper()
	r := gin.New()
	r.Use(ginlimit.New(lim, ginlimit.WithKey(ginlimit.KeyByHeader(apiKeyHeader))))
	r.GET("/ping", func(c *gin.Context) { c.String(http.StatusOK, pong) })
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv.URL
}

func startEcho(t *testing.T, lim *slidelimit.Limiter) string {
	t.Helper()
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.Use(echolimit.NewWithConfig(lim, echolimit.Config{IdentifierExtractor: echolimit.KeyByHeader(apiKeyHeader)}))
	e.GET("/ping", func(c echo.Context) error { return c.String(http.StatusOK, pong) })
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return srv.URL
}

func startFiber(t *testing.T, lim *slidelimit.Limiter) string {
	t.Helper()
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(fiberlimit.New(lim, fiberlimit.Config{KeyGenerator: fiberlimit.KeyByHeader(apiKeyHeader)}))
	app.Get("/ping", func(c *fiber.Ctx) error { return c.SendString(pong) })
	return serveFiber(t, app)
}

// serveFiber serves app on a free loopback port until the test ends and
// returns its base URL.
func serveFiber(t *testing.T, app *fiber.App) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- app.Listener(ln) }()
	t.Cleanup(func() {
		if err := app.Shutdown(); err != nil {
			t.Errorf("fiber: shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("fiber: serve: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

// admitted reports whether a response of status code admitted the
// request: 200 did, 429 did not, and anything else is an error.
func admitted(code int) (bool, error) {
	switch code {
	case http.StatusOK:
		return true, nil
	case http.StatusTooManyRequests:
		return false, nil
	}
	return false, fmt.Errorf("status %d, want 200 or 429", code)
}

func startNetHTTP(t *testing.T, lim *slidelimit.Limiter) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ping", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(pong)) })
	srv := httptest.NewServer(httplimit.New(lim, httplimit.WithKey(httplimit.KeyByHeader(apiKeyHeader)))(mux))
	t.Cleanup(srv.Close)
	return srv.URL
}
