package echolimit_test

import (
	"net/http"
	"net/http/httptest"
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

// TestSettleInEchosIdioms: a request is settled from what a handler stored
// with c.Set, or from the usage at the end of a flushed stream; one whose
// handler returns an *echo.HTTPError, or panics under middleware.Recover,
// gives back its place in flight and keeps its estimate.
func TestSettleInEchosIdioms(t *testing.T) {
	t.Parallel()
	lim := adaptertest.NewLimiter(t, redistest.Client(t), slidelimit.PerMinute(100),
		slidelimit.WithLimits(slidelimit.InFlight(1, time.Minute)))
	e := echo.New()
	e.Use(middleware.Recover())
	e.Use(echolimit.NewWithConfig(lim, echolimit.Config{
		Cost: func(echo.Context) int { return 20 },
		Settle: func(c echo.Context, r httplimit.Response) (int, bool) {
			if n, ok := c.Get("tokens").(int); ok {
				return n, true
			}
			return httplimit.TotalTokens(r)
		},
	}))
	e.GET("/set", func(c echo.Context) error { c.Set("tokens", 3); return c.String(http.StatusOK, "ok") })
	e.GET("/stream", func(c echo.Context) error {
		c.Response().Header().Set(echo.HeaderContentType, "text/event-stream")
		_, _ = c.Response().Write([]byte("data: {\"usage\":null}\n\n"))
		c.Response().Flush()
		_, _ = c.Response().Write([]byte("data: {\"usage\":{\"total_tokens\":7}}\n\ndata: [DONE]\n\n"))
		return nil
	})
	e.GET("/error", func(echo.Context) error { return echo.NewHTTPError(http.StatusBadGateway) })
	e.GET("/panic", func(echo.Context) error { panic("handler") })

	left := 100
	for _, tt := range []struct {
		path   string
		status int
		counts int
	}{{"/set", 200, 3}, {"/stream", 200, 7}, {"/error", 502, 20}, {"/panic", 500, 20}} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequestWithContext(t.Context(), http.MethodGet, tt.path, nil)
		req.RemoteAddr = "203.0.113.9:40000"
		e.ServeHTTP(rec, req)
		if rec.Code != tt.status {
			t.Fatalf("GET %s = %d, want %d", tt.path, rec.Code, tt.status)
		}
		left -= tt.counts
		res, err := lim.Peek(t.Context(), slidelimit.IPIdentity("203.0.113.9", 0))
		if err != nil {
			t.Fatal(err)
		}
		if got := [2]int{res.Statuses[0].Remaining, res.Statuses[1].Remaining}; got != [2]int{left, 1} {
			t.Errorf("after GET %s: remaining %v, want [%d 1] (settled, and the place in flight given back)", tt.path, got, left)
		}
	}
}
