package fiberlimit

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/gofiber/fiber/v2"
	slidelimit "github.com/slidelimit/slidelimit/core"
)

// Errors the handler passes to ErrorHandler and ErrorHook for a request it
// cannot decide; httplimit.FailureStatus maps both to 500.
var (
	// errNoLimiter is the error when neither New nor Config.Limiter gives
	// a limiter for a request.
	errNoLimiter = errors.New("fiberlimit: no limiter for the request: New got nil and Config.Limiter returned nil")
	// errEmptyKey is the error when KeyGenerator returns "".
	errEmptyKey = fmt.Errorf("%w: fiberlimit: KeyGenerator returned an empty key", slidelimit.ErrInvalidKey)
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
	cloneKey := !ownKeyGenerator(cfg.KeyGenerator)
	return func(c *fiber.Ctx) error {
		if cfg.Next != nil && cfg.Next(c) {
			return c.Next()
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
		// Fiber reuses the bytes of c.Get and c.Params once the handler
		// returns; the identity may outlive it in an observer or a log.
		id := cfg.KeyGenerator(c)
		if cloneKey {
			id = strings.Clone(id)
		}
		if id == "" {
			return cfg.fail(c, errEmptyKey)
		}
		cost := 1
		if cfg.Cost != nil {
			cost = cfg.Cost(c)
		}

		res, err := l.AllowN(c.UserContext(), id, cost)
		cfg.Headers.Write(res, c.Set)
		if err != nil {
			if !res.Allowed {
				return cfg.fail(c, err)
			}
			cfg.ErrorHook(c, err)
		} else if !res.Allowed {
			return cfg.LimitReached(c, res)
		}

		if res.Fallback || !cfg.SkipFailedRequests && !cfg.SkipSuccessfulRequests {
			return c.Next()
		}
		err = c.Next()
		failed := cfg.Failed(status(c, err))
		if failed && cfg.SkipFailedRequests || !failed && cfg.SkipSuccessfulRequests {
			// The client may be gone; the refund is still owed, bounded by
			// the limiter's timeout.
			if rerr := l.Refund(context.WithoutCancel(c.UserContext()), res); rerr != nil {
				cfg.ErrorHook(c, fmt.Errorf("fiberlimit: refund: %w", rerr))
			}
		}
		return err
	}
}

// fail reports err and answers the request with the error handler.
func (cfg *Config) fail(c *fiber.Ctx, err error) error {
	cfg.ErrorHook(c, err)
	return cfg.ErrorHandler(c, err)
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

// ownKeyGenerator reports whether f is KeyByIP or the Key method of a
// ClientIP, whose identities are strings of their own and need no copy.
func ownKeyGenerator(f func(*fiber.Ctx) string) bool {
	pc := reflect.ValueOf(f).Pointer()
	return pc == reflect.ValueOf(KeyByIP).Pointer() || pc == reflect.ValueOf(ClientIP{}.Key).Pointer()
}
