package echolimit

import (
	"context"
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/adapter"
)

// New returns middleware that limits requests with lim, configured by
// DefaultConfig: one unit per request, keyed by client IP. It is
// NewWithConfig(lim, DefaultConfig).
//
//	e.Use(echolimit.New(lim))
func New(lim *slidelimit.Limiter) echo.MiddlewareFunc {
	return NewWithConfig(lim, DefaultConfig)
}

// NewWithConfig returns middleware that limits requests with lim, configured
// by config, whose zero fields take the values of DefaultConfig:
//
//	e.Use(echolimit.NewWithConfig(lim, echolimit.Config{
//		Skipper:             func(c echo.Context) bool { return c.Path() == "/healthz" },
//		IdentifierExtractor: echolimit.KeyByHeader("X-API-Key"),
//	}))
//
// For each request it asks lim, or the limiter config.Limiter chooses, to
// admit config.Cost units (1 by default) for the identity
// config.IdentifierExtractor returns (by default the client IP), and sets
// the rate-limit headers of the decision (config.Headers) on the response.
// An admitted request goes on to the next handler. A denied one is answered
// by config.DenyHandler, by default an *echo.HTTPError with code 429 that
// the app's HTTPErrorHandler renders, Retry-After already set.
//
// A request admitted under an in-flight limit (slidelimit.InFlight) holds
// its place while the next handlers run, renewed for as long as they run,
// and releases it when they return or panic. With config.Settle, the
// request is settled from its response to its actual cost, in the same
// round trip.
//
// When Redis fails, the limiter's slidelimit.FailurePolicy decides. Under
// FailOpen, the default, the request goes on with no rate-limit headers,
// since none could be checked; under FailClosed it is answered by
// config.ErrorHandler, by default an *echo.HTTPError with code 503,
// Retry-After already set. Either way the error goes to config.ErrorHook. A
// dead Redis delays a request by at most the limiter's timeout
// (slidelimit.WithTimeout).
//
// A nil lim is allowed only with config.Limiter; a request for which there
// is no limiter goes to config.ErrorHandler. The middleware is safe for
// concurrent use.
func NewWithConfig(lim *slidelimit.Limiter, config Config) echo.MiddlewareFunc {
	cfg := withDefaults(config)
	f := &adapter.Flow[echo.Context]{
		Name: "echolimit", Limiter: lim, Limiters: cfg.Limiter, Skip: cfg.Skipper,
		Key: cfg.IdentifierExtractor, Cost: cfg.Cost, Limits: cfg.Limits, Tree: cfg.Tree,
		SetHeaders:   func(c echo.Context, res slidelimit.Result) { cfg.Headers.SetHeader(res, c.Response().Header()) },
		Hook:         func(_ context.Context, c echo.Context, err error) { cfg.ErrorHook(c, err) },
		RefundFailed: cfg.SkipFailedRequests, RefundSuccessful: cfg.SkipSuccessfulRequests, Failed: cfg.Failed,
		Settle: cfg.Settle,
	}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			ctx := c.Request().Context()
			d := f.Decide(ctx, c)
			switch d.Verdict {
			case adapter.Deny:
				return cfg.DenyHandler(c, d.Result)
			case adapter.Fail:
				return cfg.ErrorHandler(c, d.Err)
			}
			p := f.Pend(ctx, c, d)
			if p == nil {
				return next(c) // nothing owed at the end
			}
			defer p.Abort() // a panic releases the places in flight
			if p.Captures() {
				resp := c.Response()
				w := resp.Writer
				resp.Writer = &adapter.ResponseWriter{ResponseWriter: w, Body: p}
				defer func() { resp.Writer = w }()
			}
			err := next(c)
			p.End(status(c, err), c.Response().Header())
			return err
		}
	}
}

// status returns the status the response has, or will have once err, the
// next handlers' error, is handled the way echo's DefaultHTTPErrorHandler
// does.
func status(c echo.Context, err error) int {
	resp := c.Response()
	if err == nil || resp.Committed {
		return resp.Status
	}
	if he := (*echo.HTTPError)(nil); errors.As(err, &he) {
		if internal := (*echo.HTTPError)(nil); errors.As(he.Internal, &internal) {
			return internal.Code
		}
		return he.Code
	}
	return http.StatusInternalServerError
}
