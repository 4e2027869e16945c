package echolimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"
	slidelimit "github.com/slidelimit/slidelimit/core"
)

// errNoLimiter is the error when neither NewWithConfig nor Config.Limiter
// gives a limiter for a request.
var errNoLimiter = errors.New("echolimit: no limiter for the request: NewWithConfig got nil and Config.Limiter returned nil")

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
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if cfg.Skipper != nil && cfg.Skipper(c) {
				return next(c)
			}
			l := lim
			if cfg.Limiter != nil {
				if chosen := cfg.Limiter(c); chosen != nil {
					l = chosen
				}
			}
			if l == nil {
				return cfg.fail(c, errNoLimiter)
			}
			id, err := cfg.IdentifierExtractor(c)
			if err != nil {
				return cfg.fail(c, fmt.Errorf("echolimit: identifier: %w", err))
			}
			cost := 1
			if cfg.Cost != nil {
				cost = cfg.Cost(c)
			}

			ctx := c.Request().Context()
			res, err := l.AllowN(ctx, id, cost)
			cfg.Headers.SetHeader(res, c.Response().Header())
			if err != nil {
				if !res.Allowed {
					return cfg.fail(c, err)
				}
				cfg.ErrorHook(c, err)
			} else if !res.Allowed {
				return cfg.DenyHandler(c, res)
			}

			if res.Fallback || !cfg.SkipFailedRequests && !cfg.SkipSuccessfulRequests {
				return next(c)
			}
			err = next(c)
			failed := cfg.Failed(status(c, err))
			if failed && cfg.SkipFailedRequests || !failed && cfg.SkipSuccessfulRequests {
				// The client may be gone; the refund is still owed, bounded
				// by the limiter's timeout.
				if rerr := l.Refund(context.WithoutCancel(ctx), res); rerr != nil {
					cfg.ErrorHook(c, fmt.Errorf("echolimit: refund: %w", rerr))
				}
			}
			return err
		}
	}
}

// fail reports err and answers the request with the error handler.
func (cfg *Config) fail(c echo.Context, err error) error {
	cfg.ErrorHook(c, err)
	return cfg.ErrorHandler(c, err)
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
