package ginlimit_test

import (
	"strconv"
	"testing"

	"github.com/gin-gonic/gin"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/adaptertest"
	"github.com/slidelimit/slidelimit/core/httplimit"
	ginlimit "github.com/slidelimit/slidelimit/gin"
)

// TestConformance runs the suite every adapter passes.
func TestConformance(t *testing.T) {
	adaptertest.Run(t, func(_ *testing.T, s adaptertest.Settings) adaptertest.Server {
		opts := []ginlimit.Option{
			ginlimit.WithKey(ginlimit.ClientIP(s.ClientIP).Key),
			ginlimit.WithLimiterFunc(func(c *gin.Context) *slidelimit.Limiter { return s.LimiterFor(c.Request.URL.Path) }),
			ginlimit.WithSkip(func(c *gin.Context) bool { return c.Request.URL.Path == s.SkipPath }),
			ginlimit.WithHeaders(s.Headers),
		}
		if s.KeyHeader != "" {
			opts = append(opts, ginlimit.WithKey(ginlimit.KeyByHeader(s.KeyHeader)))
		}
		if s.CostHeader != "" {
			opts = append(opts, ginlimit.WithCost(func(c *gin.Context) int { n, _ := strconv.Atoi(c.GetHeader(s.CostHeader)); return n }))
		}
		if s.PlanHeader != "" {
			opts = append(opts, ginlimit.WithLimits(func(c *gin.Context) []slidelimit.Limit { return adaptertest.Plan(c.GetHeader(s.PlanHeader)) }))
		}
		if s.Tree != nil {
			opts = append(opts, ginlimit.WithTree(func(c *gin.Context) (string, []slidelimit.Level, error) {
				return s.Tree(c.GetHeader(adaptertest.TreeHeader))
			}))
		}
		if s.RefundFailed {
			opts = append(opts, ginlimit.WithRefundFailed())
		}
		if s.RefundSuccessful {
			opts = append(opts, ginlimit.WithRefundSuccessful())
		}
		if s.Settle {
			opts = append(opts, ginlimit.WithSettle(func(_ *gin.Context, r httplimit.Response) (int, bool) { return httplimit.TotalTokens(r) }))
		}
		if s.Hook != nil {
			opts = append(opts, ginlimit.WithErrorHook(func(_ *gin.Context, err error) { s.Hook(err) }))
		}
		r := gin.New()
		r.Use(ginlimit.New(s.Limiter, opts...))
		r.NoRoute(func(c *gin.Context) { adaptertest.AnswerTo(c.Request.Header).Serve(c.Writer, c.Request) })
		return adaptertest.HTTPServer(r)
	})
}
