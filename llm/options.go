package llmlimit

import (
	"math"
	"net/http"
	"time"

	"github.com/slidelimit/slidelimit/core/adapter"
)

// Option configures the middleware returned by New. The With… functions
// of this package make them; a nil Option is ignored.
type Option func(*config)

// config is the middleware's settings.
type config struct {
	window, lease    time.Duration
	defaultMaxTokens int
	maxBody          int64
	estimate         func(r *http.Request, req Request) int
	refunded         func(status int) bool
	hook             func(r *http.Request, err error)
}

// Defaults of the options.
const (
	// DefaultWindow is the window of Limits.Requests and Limits.Tokens.
	DefaultWindow = time.Minute
	// DefaultLease is how long a request's place in flight outlives a
	// replica that died holding it.
	DefaultLease = time.Minute
	// DefaultMaxTokens is the output a request that names no maximum is
	// estimated to produce.
	DefaultMaxTokens = 4096
	// DefaultMaxBody is the largest request body the middleware reads.
	DefaultMaxBody = 8 << 20
)

func newConfig(opts []Option) config {
	c := config{window: DefaultWindow, lease: DefaultLease, defaultMaxTokens: DefaultMaxTokens, maxBody: DefaultMaxBody,
		refunded: adapter.HTTPFailed}
	c.estimate = c.defaultEstimate
	c.hook = func(r *http.Request, err error) {
		adapter.LogError(r.Context(), "llmlimit", err, "method", r.Method, "path", r.URL.Path)
	}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	return c
}

// WithWindow sets the window of Limits.Requests and Limits.Tokens, such as
// 10 seconds for a test. The default is DefaultWindow, a minute, as
// OpenAI's RPM and TPM. A d below a millisecond keeps the default.
func WithWindow(d time.Duration) Option {
	return func(c *config) {
		if d >= time.Millisecond {
			c.window = d
		}
	}
}

// WithLease sets the lease of a place in flight (Limits.InFlight): the
// middleware renews it while the request runs, so it bounds only how long
// the places of a replica that died stay taken. The default is
// DefaultLease, a minute. A d below a millisecond keeps the default.
func WithLease(d time.Duration) Option {
	return func(c *config) {
		if d >= time.Millisecond {
			c.lease = d
		}
	}
}

// WithDefaultMaxTokens sets the output tokens reserved for a request that
// names no maximum (max_tokens, max_completion_tokens,
// max_output_tokens). The default is DefaultMaxTokens, 4096. An n below 1
// keeps the default.
func WithDefaultMaxTokens(n int) Option {
	return func(c *config) {
		if n >= 1 {
			c.defaultMaxTokens = n
		}
	}
}

// WithMaxBody sets the largest request body the middleware reads, in
// bytes; a larger one is answered 413 in the API's error format. The
// default is DefaultMaxBody, 8 MiB. An n below 1 keeps the default.
func WithMaxBody(n int64) Option {
	return func(c *config) {
		if n >= 1 {
			c.maxBody = n
		}
	}
}

// WithEstimate sets the tokens a request reserves when it is admitted,
// until its answer's usage settles it. The default is Estimate with the
// default of WithDefaultMaxTokens. A nil f keeps the default.
func WithEstimate(f func(r *http.Request, req Request) int) Option {
	return func(c *config) {
		if f != nil {
			c.estimate = f
		}
	}
}

// WithRefund sets which statuses of an answer give a request back whole,
// neither its tokens nor the request counted: by default 400 and above, an
// answer the API refused or failed, which used no tokens. A nil f keeps
// the default.
func WithRefund(f func(status int) bool) Option {
	return func(c *config) {
		if f != nil {
			c.refunded = f
		}
	}
}

// WithErrorHook sets f to receive every error the middleware meets: Redis
// failures, admitted (fail-open) or not, caller errors, failed settles. It
// runs on the request's goroutine, so it should be fast. The default logs
// each with slog.Default at level Error, but Redis failures, which the
// limiter reports once per outage (slidelimit.WithLogger). A nil f keeps
// the default.
func WithErrorHook(f func(r *http.Request, err error)) Option {
	return func(c *config) {
		if f != nil {
			c.hook = f
		}
	}
}

// Estimate returns the tokens a request may use, as the middleware
// reserves them by default: its input at one token per 4 bytes of its
// JSON (more than any tokenizer counts for text), plus its maximum output,
// or defaultMax if it names none; an embedding has input only.
func Estimate(req Request, defaultMax int) int {
	n := (req.InputBytes + 3) / 4
	switch {
	case req.Endpoint == Embeddings:
	case req.MaxOutput > 0:
		n += min(req.MaxOutput, math.MaxInt32) // no overflow from a hostile maximum
	default:
		n += defaultMax
	}
	return max(n, 1)
}

func (c *config) defaultEstimate(_ *http.Request, req Request) int {
	return Estimate(req, c.defaultMaxTokens)
}
