package fiberlimit_test

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"net/http"
	"strconv"
	"testing"

	"github.com/gofiber/fiber/v2"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/adaptertest"
	"github.com/slidelimit/slidelimit/core/httplimit"
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
		if s.Tree != nil {
			// c.Get's bytes are Fiber's to reuse: the tree function must
			// not need a copy (Config.Tree makes one).
			cfg.Tree = func(c *fiber.Ctx) (string, []slidelimit.Level, error) { return s.Tree(c.Get(adaptertest.TreeHeader)) }
		}
		if s.Settle {
			cfg.Settle = httplimit.TotalTokens
		}
		if s.Hook != nil {
			cfg.ErrorHook = func(_ *fiber.Ctx, err error) { s.Hook(err) }
		}
		app := newApp()
		app.Use(fiberlimit.New(s.Limiter, cfg), answer)
		return fasthttpServer(app.Handler())
	})
}

// answer answers as the request asks (adaptertest.AnswerTo), a stream
// with a body stream writer, the way Fiber streams.
func answer(c *fiber.Ctx) error {
	h := http.Header{}
	c.Request().Header.VisitAll(func(k, v []byte) { h.Add(string(k), string(v)) })
	a := adaptertest.AnswerTo(h)
	c.Status(a.Status)
	if !a.Stream {
		a.Wait(context.Background())
		return c.Send(bytes.Join(a.Body(), nil))
	}
	c.Set(fiber.HeaderContentType, "text/event-stream")
	c.Context().SetBodyStreamWriter(func(w *bufio.Writer) {
		for i, chunk := range a.Body() {
			_, _ = w.Write(chunk)
			_ = w.Flush()
			if i == 0 {
				a.Wait(context.Background())
			}
		}
	})
	return nil
}

// fasthttpServer serves each request with h as Fiber's server would, from
// the request's peer: it reads a streamed body to its end, then closes
// the request's user values, as fasthttp does once it has written the
// response.
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
		body := append([]byte(nil), ctx.Response.Body()...)
		ctx.ResetUserValues()
		return adaptertest.HTTPResponse(ctx.Response.StatusCode(), header, body)
	}
}
