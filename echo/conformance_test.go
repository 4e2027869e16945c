package echolimit_test

import (
	"strconv"
	"testing"

	"github.com/labstack/echo/v4"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/adaptertest"
	"github.com/slidelimit/slidelimit/core/httplimit"
	echolimit "github.com/slidelimit/slidelimit/echo"
)

// TestConformance runs the suite every adapter passes.
func TestConformance(t *testing.T) {
	adaptertest.Run(t, func(_ *testing.T, s adaptertest.Settings) adaptertest.Server {
		cfg := echolimit.Config{
			IdentifierExtractor:    echolimit.ClientIP(s.ClientIP).Key,
			Limiter:                func(c echo.Context) *slidelimit.Limiter { return s.LimiterFor(c.Request().URL.Path) },
			Skipper:                func(c echo.Context) bool { return c.Request().URL.Path == s.SkipPath },
			SkipFailedRequests:     s.RefundFailed,
			SkipSuccessfulRequests: s.RefundSuccessful,
			Headers:                s.Headers,
		}
		if s.KeyHeader != "" {
			cfg.IdentifierExtractor = echolimit.KeyByHeader(s.KeyHeader)
		}
		if s.CostHeader != "" {
			cfg.Cost = func(c echo.Context) int { n, _ := strconv.Atoi(c.Request().Header.Get(s.CostHeader)); return n }
		}
		if s.PlanHeader != "" {
			cfg.Limits = func(c echo.Context) []slidelimit.Limit { return adaptertest.Plan(c.Request().Header.Get(s.PlanHeader)) }
		}
		if s.Tree != nil {
			cfg.Tree = func(c echo.Context) (string, []slidelimit.Level, error) {
				return s.Tree(c.Request().Header.Get(adaptertest.TreeHeader))
			}
		}
		if s.Settle {
			cfg.Settle = func(_ echo.Context, r httplimit.Response) (int, bool) { return httplimit.TotalTokens(r) }
		}
		if s.Hook != nil {
			cfg.ErrorHook = func(_ echo.Context, err error) { s.Hook(err) }
		}
		e := echo.New()
		e.Use(echolimit.NewWithConfig(s.Limiter, cfg))
		e.RouteNotFound("/*", func(c echo.Context) error {
			adaptertest.AnswerTo(c.Request().Header).Serve(c.Response(), c.Request())
			return nil
		})
		return adaptertest.HTTPServer(e)
	})
}
