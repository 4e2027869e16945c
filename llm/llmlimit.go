package llmlimit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/adapter"
	"github.com/slidelimit/slidelimit/core/httplimit"
)

// CallerFunc returns who makes a request: the levels of its tree and
// their limits, such as its API key's, its team's and its organisation's,
// read from the request's Authorization header and a configuration. req
// is what the middleware read of the body, for limits by model. An error
// wrapping ErrUnknownCaller is answered 401; any other, 500.
type CallerFunc func(r *http.Request, req Request) (Caller, error)

// New returns middleware that limits the requests to an OpenAI-compatible
// or Anthropic API, in the shape http.ServeMux and an
// httputil.ReverseProxy take:
//
//	proxy := &httputil.ReverseProxy{Rewrite: …}
//	http.ListenAndServe(":8080", llmlimit.New(lim, callers)(proxy))
//
// It limits POST requests to /v1/chat/completions, /v1/completions,
// /v1/responses, /v1/embeddings and Anthropic's /v1/messages (under any
// prefix), and passes every other request on untouched. For each, it reads
// the body (WithMaxBody), restores it for the next handler, and asks lim
// to admit the request for its caller's tree (callers) at every level at
// once (slidelimit.Limiter.AllowTree): one request, its estimated tokens
// (Estimate: its input and its max_tokens), a place in flight. lim's own
// limits take no part; its options do (WithPrefix, WithTimeout, the
// FailurePolicy, WithShadow, observers).
//
// An admitted request goes on with its body, and a streamed chat or
// completion request that did not ask for its usage is made to
// ("stream_options":{"include_usage":true}); the chunk that carries it is
// taken out of the stream again on its way back. Accept-Encoding is
// removed, so that the answer comes uncompressed. When the answer ends,
// the request is settled to the tokens its usage reports (a JSON answer's
// usage, or a stream's last usage: total_tokens, or the input and output
// tokens added up), which also releases its place in flight; an answer
// without usage keeps the estimate, and a refused one (WithRefund, 400 and
// above) is given back whole. A place in flight is renewed while its
// request runs.
//
// Every answer to a limited request carries the rate-limit header fields
// of its API, for the tightest enforced limit of requests and of tokens of
// the caller's tree: OpenAI's x-ratelimit-limit-requests,
// -remaining-requests, -reset-requests (a duration, such as "6m0s" or
// "20ms") and the same of tokens, replacing any the next handler sets, or
// Anthropic's anthropic-ratelimit-requests-limit, -remaining, -reset (an
// RFC 3339 time) and the same of tokens. A denial is answered 429 with
// Retry-After (whole seconds, rounded up), Retry-After-Ms (which the
// official SDKs prefer) and the API's error body: OpenAI's
// {"error":{"message":…,"type":"requests" or "tokens","param":null,"code":"rate_limit_exceeded"}},
// Anthropic's {"type":"error","error":{"type":"rate_limit_error","message":…}}.
// A denial by a limit of requests in flight says to retry within a second:
// a place frees when a request ends, which its lease only bounds.
// A body the middleware cannot read is answered 400, one too large 413, and
// a request whose estimate alone is more than its smallest limit of tokens
// admits, 400 too. A caller none of whose levels has a limit is passed on
// unlimited.
//
// When Redis fails, lim's FailurePolicy decides: under FailOpen, the
// default, the request goes on without rate-limit header fields; under
// FailClosed it is answered 503 with Retry-After. A nil lim, or a nil
// callers, fails every limited request (500). The middleware is safe for
// concurrent use.
func New(lim *slidelimit.Limiter, callers CallerFunc, opts ...Option) func(http.Handler) http.Handler {
	if callers == nil {
		callers = func(*http.Request, Request) (Caller, error) {
			return Caller{}, fmt.Errorf("%w: no caller function", ErrInvalidCaller)
		}
	}
	m := &middleware{config: newConfig(opts), callers: callers}
	m.flow = adapter.Flow[*exchange]{
		Name: "llmlimit", Limiter: lim,
		Tree: func(x *exchange) (string, []slidelimit.Level, error) { return x.tenant, x.levels, nil },
		Cost: func(x *exchange) int { return x.cost },
		SetHeaders: func(x *exchange, res slidelimit.Result) {
			x.res = res
			setFields(x.w.Header(), x.api, res, time.Now())
		},
		Hook:         func(_ context.Context, x *exchange, err error) { m.hook(x.r, err) },
		RefundFailed: true, Failed: m.refunded,
		Settle: func(x *exchange, r adapter.Response) (int, bool) {
			u, ok := x.usage(r)
			// No quota counts more than MaxQuota: a larger figure, which
			// only a broken answer reports, settles to it.
			return min(u.Total, slidelimit.MaxQuota), ok
		},
	}
	return func(next http.Handler) http.Handler {
		return &handler{m: m, next: next}
	}
}

// middleware is what every handler New wraps shares.
type middleware struct {
	config
	callers CallerFunc
	flow    adapter.Flow[*exchange]
}

type handler struct {
	m    *middleware
	next http.Handler
}

// exchange is one limited request, the context the flow runs over.
type exchange struct {
	w      http.ResponseWriter
	r      *http.Request
	api    API
	tenant string
	levels []slidelimit.Level
	cost   int               // the tokens reserved
	res    slidelimit.Result // the decision, once made
	ans    *answer
}

// usage returns the usage the answer to x reported: read from the stream
// as it passed, or from the end of a JSON body, r.
func (x *exchange) usage(r adapter.Response) (reported, bool) {
	if x.ans.stream {
		return x.ans.m.usage()
	}
	var m meter
	m.readTail(r.Body, r.Size == int64(len(r.Body)))
	return m.usage()
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e, ok := endpointOf(r.URL.Path)
	if !ok || r.Method != http.MethodPost {
		h.next.ServeHTTP(w, r)
		return
	}
	m := h.m
	x := &exchange{w: w, api: e.API()}
	b, err := io.ReadAll(io.LimitReader(r.Body, m.maxBody+1))
	switch {
	case err != nil:
		writeError(w, x.api, http.StatusBadRequest, "The request body could not be read.")
		return
	case int64(len(b)) > m.maxBody:
		writeError(w, x.api, http.StatusRequestEntityTooLarge, fmt.Sprintf("The request body is larger than %d bytes.", m.maxBody))
		return
	}
	req, err := parseRequest(e, b)
	if err != nil {
		writeError(w, x.api, http.StatusBadRequest, "The request body is not a valid "+string(e)+" request: "+err.Error())
		return
	}
	caller, err := m.callers(r, req)
	if err != nil {
		if errors.Is(err, ErrUnknownCaller) {
			writeError(w, x.api, http.StatusUnauthorized, "Incorrect or missing API key.")
			return
		}
		m.hook(r, fmt.Errorf("llmlimit: caller: %w", err))
		writeError(w, x.api, http.StatusInternalServerError, "The rate limiter failed.")
		return
	}
	var minTokens int
	x.tenant, x.levels, minTokens, err = caller.tree(m.window, m.lease)
	if err != nil {
		m.hook(r, err)
		writeError(w, x.api, http.StatusInternalServerError, "The rate limiter failed.")
		return
	}
	x.cost = min(max(m.estimate(r, req), 1), slidelimit.MaxQuota)
	if minTokens > 0 && x.cost > minTokens {
		writeError(w, x.api, http.StatusBadRequest, fmt.Sprintf(
			"The request may use %d tokens (its input and its maximum output), more than the %d its limits allow: lower its maximum output.", x.cost, minTokens))
		return
	}
	strip := req.Stream && (e == ChatCompletions || e == Completions) && !req.IncludeUsage
	if strip {
		if b, err = includeUsage(b); err != nil {
			writeError(w, x.api, http.StatusBadRequest, "The request body is not a valid "+string(e)+" request: "+err.Error())
			return
		}
	}
	r = restore(r, b)
	x.r = r
	if len(x.levels) == 0 { // a caller of no limit
		h.next.ServeHTTP(w, r)
		return
	}

	f := &m.flow
	d := f.Decide(r.Context(), x)
	switch d.Verdict {
	case adapter.Deny:
		writeDenial(w, x.api, d.Result, x.cost)
		return
	case adapter.Fail:
		status := httplimit.FailureStatus(d.Err)
		if d.Result.Fallback {
			w.Header().Set("Retry-After", retryAfter(d.Result.RetryAfter))
		}
		writeError(w, x.api, status, http.StatusText(status)+": the rate limiter could not decide.")
		return
	}
	x.ans = &answer{ResponseWriter: w, strip: strip, fields: func(h http.Header) { setFields(h, x.api, x.res, time.Now()) }}
	p := f.Pend(r.Context(), x, d)
	if p == nil {
		h.next.ServeHTTP(x.ans, r)
		x.ans.finish()
		return
	}
	defer p.Abort() // a handler that panics releases its places in flight
	rw := &adapter.ResponseWriter{ResponseWriter: w}
	if p.Captures() {
		rw.Body = p
	}
	x.ans.ResponseWriter = rw
	h.next.ServeHTTP(x.ans, r)
	x.ans.finish()
	p.End(rw.Status(), w.Header())
}

// restore returns r with body b, and without Accept-Encoding, so that the
// answer comes uncompressed and its usage can be read.
func restore(r *http.Request, b []byte) *http.Request {
	r = r.Clone(r.Context())
	r.Body = io.NopCloser(bytes.NewReader(b))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	r.ContentLength = int64(len(b))
	r.Header.Set("Content-Length", strconv.Itoa(len(b)))
	r.Header.Del("Accept-Encoding")
	return r
}
