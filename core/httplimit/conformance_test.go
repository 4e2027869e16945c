package httplimit_test

import (
	"net/http"
	"strconv"
	"testing"

	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/adaptertest"
	"github.com/slidelimit/slidelimit/core/httplimit"
)

// TestConformance runs the suite every adapter passes.
func TestConformance(t *testing.T) {
	adaptertest.Run(t, func(_ *testing.T, s adaptertest.Settings) adaptertest.Server {
		opts := []httplimit.Option{
			httplimit.WithKey(httplimit.ClientIP(s.ClientIP).Key),
			httplimit.WithLimiterFunc(func(r *http.Request) *slidelimit.Limiter { return s.LimiterFor(r.URL.Path) }),
			httplimit.WithSkip(func(r *http.Request) bool { return r.URL.Path == s.SkipPath }),
			httplimit.WithHeaders(s.Headers),
		}
		if s.KeyHeader != "" {
			opts = append(opts, httplimit.WithKey(httplimit.KeyByHeader(s.KeyHeader)))
		}
		if s.CostHeader != "" {
			opts = append(opts, httplimit.WithCost(func(r *http.Request) int { n, _ := strconv.Atoi(r.Header.Get(s.CostHeader)); return n }))
		}
		if s.PlanHeader != "" {
			opts = append(opts, httplimit.WithLimits(func(r *http.Request) []slidelimit.Limit { return adaptertest.Plan(r.Header.Get(s.PlanHeader)) }))
		}
		if s.Tree != nil {
			opts = append(opts, httplimit.WithTree(func(r *http.Request) (string, []slidelimit.Level, error) {
				return s.Tree(r.Header.Get(adaptertest.TreeHeader))
			}))
		}
		if s.RefundFailed {
			opts = append(opts, httplimit.WithRefundFailed())
		}
		if s.RefundSuccessful {
			opts = append(opts, httplimit.WithRefundSuccessful())
		}
		if s.Settle {
			opts = append(opts, httplimit.WithSettle(httplimit.TotalTokens))
		}
		if s.Hook != nil {
			opts = append(opts, httplimit.WithErrorHook(func(_ *http.Request, err error) { s.Hook(err) }))
		}
		return adaptertest.HTTPServer(httplimit.New(s.Limiter, opts...)(adaptertest.Handler))
	})
}
