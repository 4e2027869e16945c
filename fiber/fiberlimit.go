package fiberlimit

import (
	"context"
	"errors"
	"net/http"
	"reflect"
	"strings"

	"github.com/gofiber/fiber/v2"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/adapter"
)

// New returns a fiber.Handler that limits requests with lim:
//
//	app.Use(fiberlimit.New(lim))
//	app.Get("/search", fiberlimit.New(searchLim, fiberlimit.Config{KeyGenerator: fiberlimit.KeyByHeader("X-API-Key")}), search)
//
// For each request it asks lim, or the limiter Config.Limiter chooses, to
// admit Config.Cost units (1 by default) for the identity
// Config.KeyGenerator returns (by default the peer address; behind a proxy,
// see ClientIP), and sets the rate-limit headers of the decision (Config.Headers). An
// admitted request goes on to the next handler; a denied one is answered by
// Config.LimitReached, by default 429 Too Many Requests with Retry-After and
// an application/problem+json body.
//
// A request admitted under an in-flight limit (slidelimit.InFlight) holds
// its place while the next handlers run, renewed for as long as they run,
// and releases it when they return or panic; a body they stream
// (c.SendStream, c.Context().SetBodyStreamWriter) keeps it until the
// stream has been sent. With Config.Settle, the request is settled from
// its response to its actual cost, in the same round trip; a stream at
// its end.
//
// When Redis fails, the limiter's slidelimit.FailurePolicy decides. Under
// FailOpen, the default, the request goes on with no rate-limit headers,
// since none could be checked; under FailClosed it is answered by
// Config.ErrorHandler, by default 503 with Retry-After. Either way the error
// goes to Config.ErrorHook. A dead Redis delays a request by at most the
// limiter's timeout (slidelimit.WithTimeout).
//
// New takes at most one Config; its zero fields take the values of
// ConfigDefault. A nil lim is allowed only with Config.Limiter; a request
// for which there is no limiter goes to Config.ErrorHandler. The handler is
// safe for concurrent use.
func New(lim *slidelimit.Limiter, config ...Config) fiber.Handler {
	cfg := configDefault(config...)
	key := cfg.KeyGenerator
	if !ownKeyGenerator(key) {
		// Fiber reuses the bytes of c.Get and c.Params once the handler
		// returns; the identity may outlive it in an observer or a log.
		key = func(c *fiber.Ctx) string { return strings.Clone(cfg.KeyGenerator(c)) }
	}
	f := &adapter.Flow[*fiber.Ctx]{
		Name: "fiberlimit", Limiter: lim, Limiters: cfg.Limiter, Skip: cfg.Next,
		Key: adapter.Strict(key), Cost: cfg.Cost, Limits: cfg.Limits,
		SetHeaders:   func(c *fiber.Ctx, res slidelimit.Result) { cfg.Headers.Write(res, c.Set) },
		Hook:         func(_ context.Context, c *fiber.Ctx, err error) { cfg.ErrorHook(c, err) },
		RefundFailed: cfg.SkipFailedRequests, RefundSuccessful: cfg.SkipSuccessfulRequests, Failed: cfg.Failed,
	}
	if cfg.Tree != nil {
		f.Tree = func(c *fiber.Ctx) (string, []slidelimit.Level, error) { return ownTree(cfg.Tree(c)) }
	}
	if cfg.Settle != nil {
		f.Settle = func(_ *fiber.Ctx, r adapter.Response) (int, bool) { return cfg.Settle(r) }
	}
	return func(c *fiber.Ctx) error {
		ctx := c.UserContext()
		d := f.Decide(ctx, c)
		switch d.Verdict {
		case adapter.Deny:
			return cfg.LimitReached(c, d.Result)
		case adapter.Fail:
			return cfg.ErrorHandler(c, d.Err)
		}
		p := f.Pend(ctx, c, d)
		if p == nil {
			return c.Next() // nothing owed at the end
		}
		defer p.Abort() // a panic releases the places in flight
		err := c.Next()
		resp := c.Response()
		if resp.IsBodyStream() {
			// Sent after the handlers return: the request ends when it has been.
			c.Context().SetUserValue(p, ended(p.Hold()))
			if p.Captures() {
				teeBodyStream(resp, p)
			}
		} else if p.Captures() {
			_, _ = p.Write(resp.Body())
		}
		var header http.Header
		if p.Captures() {
			header = make(http.Header)
			resp.Header.VisitAll(func(k, v []byte) { header.Add(string(k), string(v)) })
		}
		p.End(status(c, err), header)
		return err
	}
}

// status returns the status the response will have once err, the next
// handlers' error, is handled the way fiber.DefaultErrorHandler does.
func status(c *fiber.Ctx, err error) int {
	if err == nil {
		return c.Response().StatusCode()
	}
	if fe := (*fiber.Error)(nil); errors.As(err, &fe) {
		return fe.Code
	}
	return fiber.StatusInternalServerError
}

// ownTree returns a tree function's tenant and levels with identities of
// their own: Fiber reuses the bytes of c.Get and c.Params once the handler
// returns, and the tenant may outlive it in an observer or a log. The
// levels are copied, not changed: the function may return a shared slice.
func ownTree(tenant string, levels []slidelimit.Level, err error) (string, []slidelimit.Level, error) {
	if err != nil {
		return "", nil, err
	}
	own := make([]slidelimit.Level, len(levels))
	for i, lv := range levels {
		own[i] = slidelimit.Level{Identity: strings.Clone(lv.Identity), Limits: lv.Limits}
	}
	return strings.Clone(tenant), own, nil
}

// ownKeyGenerator reports whether f is KeyByIP or the Key method of a
// ClientIP, whose identities are strings of their own and need no copy.
func ownKeyGenerator(f func(*fiber.Ctx) string) bool {
	pc := reflect.ValueOf(f).Pointer()
	return pc == reflect.ValueOf(KeyByIP).Pointer() || pc == reflect.ValueOf(ClientIP{}.Key).Pointer()
}
