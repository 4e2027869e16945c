package ginlimit_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/adaptertest"
	"github.com/slidelimit/slidelimit/core/httplimit"
	"github.com/slidelimit/slidelimit/core/redistest"
	ginlimit "github.com/slidelimit/slidelimit/gin"
)

// TestSettleInGinsIdioms: a request is settled from what a handler stored
// with c.Set, or from the usage of events sent with c.SSEvent; one that
// panics under gin.Recovery gives back its place in flight and keeps its
// estimate.
func TestSettleInGinsIdioms(t *testing.T) {
	t.Parallel()
	lim := adaptertest.NewLimiter(t, redistest.Client(t), slidelimit.PerMinute(100),
		slidelimit.WithLimits(slidelimit.InFlight(1, time.Minute)))
	r := gin.New()
	r.Use(gin.CustomRecoveryWithWriter(io.Discard, func(c *gin.Context, _ any) { c.AbortWithStatus(http.StatusInternalServerError) }))
	r.Use(ginlimit.New(lim,
		ginlimit.WithCost(func(*gin.Context) int { return 20 }),
		ginlimit.WithSettle(func(c *gin.Context, res httplimit.Response) (int, bool) {
			if n, ok := c.Get("tokens"); ok {
				return n.(int), true
			}
			return httplimit.TotalTokens(res)
		})))
	r.GET("/set", func(c *gin.Context) { c.Set("tokens", 3); c.String(http.StatusOK, "ok") })
	r.GET("/sse", func(c *gin.Context) {
		c.SSEvent("message", gin.H{"choices": []string{"a"}, "usage": nil})
		c.Writer.Flush()
		c.SSEvent("message", gin.H{"choices": []string{}, "usage": gin.H{"total_tokens": 7}})
	})
	r.GET("/panic", func(*gin.Context) { panic("handler") })

	left := 100
	for _, tt := range []struct {
		path   string
		status int
		counts int
	}{{"/set", 200, 3}, {"/sse", 200, 7}, {"/panic", 500, 20}} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequestWithContext(t.Context(), http.MethodGet, tt.path, nil)
		req.RemoteAddr = "203.0.113.9:40000"
		r.ServeHTTP(rec, req)
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
