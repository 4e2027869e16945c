package fiberlimit_test

import (
	"net"
	"net/http"
	"strconv"
	"testing"

	"github.com/gofiber/fiber/v2"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/adaptertest"
	fiberlimit "github.com/slidelimit/slidelimit/fiber"
	"github.com/valyala/fasthttp"
)

// TestConformance runs the suite every adapter passes.
func TestConformance(t *testing.T) {
	adaptertest.Run(t, func(_ *testing.T, s adaptertest.Settings) adaptertest.Server {
		cfg := fiberlimit.Config{
			KeyGenerator:           fiberlimit.ClientIP(s.ClientIP).Key,
			Limiter:                func(c *fiber.Ctx) *slidelimit.Limiter { return s.LimiterFor(c.Path()) },
			Next:                   func(c *fiber.Ctx) bool { return c.Path() == s.SkipPath },
			SkipFailedRequests:     s.RefundFailed,
			SkipSuccessfulRequests: s.RefundSuccessful,
			Headers:                s.Headers,
		}
		if s.KeyHeader != "" {
			cfg.KeyGenerator = fiberlimit.KeyByHeader(s.KeyHeader)
		}
		if s.CostHeader != "" {
			cfg.Cost = func(c *fiber.Ctx) int { n, _ := strconv.Atoi(c.Get(s.CostHeader)); return n }
		}
		if s.PlanHeader != "" {
			cfg.Limits = func(c *fiber.Ctx) []slidelimit.Limit { return adaptertest.Plan(c.Get(s.PlanHeader)) }
		}
		if s.Hook != nil {
			cfg.ErrorHook = func(_ *fiber.Ctx, err error) { s.Hook(err) }
		}
		app := newApp()
		app.Use(fiberlimit.New(s.Limiter, cfg), func(c *fiber.Ctx) error {
			h := http.Header{}
			c.Request().Header.VisitAll(func(k, v []byte) { h.Add(string(k), string(v)) })
			return c.SendStatus(adaptertest.WantStatus(h))
		})
		return fasthttpServer(app.Handler())
	})
}

// fasthttpServer serves each request with h as Fiber's server would, from
// the request's peer.
func fasthttpServer(h fasthttp.RequestHandler) adaptertest.Server {
	return func(t testing.TB, r adaptertest.Request) adaptertest.Response {
		hr := r.HTTPRequest(t)
		var req fasthttp.Request
		req.Header.SetMethod(hr.Method)
		req.SetRequestURI(hr.URL.RequestURI())
		for name, values := range hr.Header {
			for _, v := range values {
				req.Header.Add(name, v)
			}
		}
		var ctx fasthttp.RequestCtx
		ctx.Init(&req, &net.TCPAddr{IP: r.Peer.AsSlice(), Port: 40000}, nil)
		h(&ctx)
		header := http.Header{}
		ctx.Response.Header.VisitAll(func(k, v []byte) { header.Add(string(k), string(v)) })
		return adaptertest.HTTPResponse(ctx.Response.StatusCode(), header, append([]byte(nil), ctx.Response.Body()...))
	}
}
