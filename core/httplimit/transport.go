package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	slidelimit "github.com/slidelimit/slidelimit/core"
)

// Transport is an http.RoundTripper that limits outgoing requests: the
// calls a fleet of workers makes to a partner API whose quota they share.
// Before sending a request it waits, within the request's context, until
// the limiter admits it (slidelimit.Limiter.WaitN under the request's key);
// when the partner answers with a throttling status and a Retry-After, it
// blocks that key (slidelimit.Limiter.Block) for every worker of every
// process sharing the limiter, so that the partner's throttle is obeyed at
// once by the whole fleet.
//
// It sets nothing on the request the partner sees, and does not change
// the response. A request whose response comes more than 25 ms after its
// admission (it waited for a connection to be dialed, for a busy host to
// run it, or for the partner) has its admission moved to when the response
// came (slidelimit.Limiter.Shift), after the partner counted it: so no
// request admitted later can reach the partner within a window of one it
// counted, and a window's margin only needs to cover those 25 ms and the
// admission's reply. A request that cannot be admitted before its context ends
// is not sent: RoundTrip returns the context's error, or one wrapping
// slidelimit.ErrWouldExceedDeadline at once when the context's deadline
// comes before the limit or a block could admit it.
//
// A Transport is safe for concurrent use. Use it as an http.Client's
// Transport:
//
//	client := &http.Client{Transport: httplimit.NewTransport(lim)}
type Transport struct {
	lim *slidelimit.Limiter
	cfg transportConfig
}

// NewTransport returns a Transport that limits requests with lim.
func NewTransport(lim *slidelimit.Limiter, opts ...TransportOption) *Transport {
	t := &Transport{lim: lim, cfg: transportConfig{
		base:      http.DefaultTransport,
		key:       KeyByHost,
		throttled: []int{http.StatusTooManyRequests, http.StatusServiceUnavailable},
	}}
	for _, opt := range opts {
		if opt != nil {
			opt(&t.cfg)
		}
	}
	return t
}

// errTransportNoLimiter is returned by a Transport made without a limiter.
var errTransportNoLimiter = errors.New("httplimit: Transport has no limiter")

// RoundTrip waits for the limit, sends req on the base RoundTripper, and
// records a partner's throttle. It implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.lim == nil {
		closeBody(req)
		return nil, errTransportNoLimiter
	}
	key, err := t.cfg.key(req)
	if err != nil {
		closeBody(req)
		return nil, fmt.Errorf("httplimit: key of %s %s: %w", req.Method, req.URL.Redacted(), err)
	}
	cost := 1
	if t.cfg.cost != nil {
		cost = max(t.cfg.cost(req), 1)
	}
	res, err := t.lim.WaitN(req.Context(), key, cost)
	if err != nil {
		if !res.Allowed {
			closeBody(req)
			return nil, fmt.Errorf("httplimit: wait for %s: %w", key, err)
		}
		t.report(req, err)
	}
	admitted := time.Now()
	resp, err := t.cfg.base.RoundTrip(req)
	if !res.Fallback {
		t.shiftIfLate(req, res, admitted)
	}
	if err != nil || !slices.Contains(t.cfg.throttled, resp.StatusCode) {
		return resp, err
	}
	if d, ok := RetryAfter(resp.Header.Get("Retry-After"), time.Now()); ok && d > 0 {
		// Recorded even if the caller's context ends now: the partner's
		// word holds for the others.
		if err := t.lim.Block(context.WithoutCancel(req.Context()), key, d); err != nil {
			t.report(req, err)
		}
	}
	return resp, nil
}

// leftLate is how long after its admission a request's response may come
// before the Transport moves its admission to when it came
// (slidelimit.Limiter.Shift). A partner counts a request when it arrives,
// at most when its response leaves: a request that dialed, waited for a
// busy host or for the partner would otherwise be counted by the partner
// in a window the limiter has moved past. A window's margin covers what
// arrives sooner.
const leftLate = 25 * time.Millisecond

// shiftIfLate moves the admission res of req, made at admitted, to now if
// that is more than leftLate later: off the caller's goroutine, and owed
// even if the caller is gone by then.
func (t *Transport) shiftIfLate(req *http.Request, res slidelimit.Result, admitted time.Time) {
	if late := time.Since(admitted); late > leftLate {
		ctx := context.WithoutCancel(req.Context())
		go func() {
			if err := t.lim.Shift(ctx, res, late); err != nil {
				t.report(req, err)
			}
		}()
	}
}

// report passes err to the error hook, if there is one.
func (t *Transport) report(req *http.Request, err error) {
	if t.cfg.hook != nil {
		t.cfg.hook(req, err)
	}
}

// closeBody closes req's body, which a RoundTripper must do even when it
// does not send req.
func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// KeyByHost keys an outgoing request by the host it is sent to, as
// "host:" and the URL's host in lower case, with its port if the URL has
// one: every request to one partner host shares one limit. It is the
// Transport's default key.
func KeyByHost(r *http.Request) (string, error) {
	if r.URL == nil || r.URL.Host == "" {
		return "", errors.New("httplimit: request URL has no host")
	}
	return "host:" + strings.ToLower(r.URL.Host), nil
}

// RetryAfter parses a Retry-After field value, a number of seconds or an
// HTTP date, into how long to wait from now. It reports false for an empty
// or malformed value; a date in the past is a wait of zero.
func RetryAfter(value string, now time.Time) (time.Duration, bool) {
	value = strings.TrimSpace(value)
	if value == "" {
		return 0, false
	}
	if secs, err := strconv.ParseInt(value, 10, 64); err == nil {
		if secs < 0 {
			return 0, false
		}
		return time.Duration(min(secs, int64(slidelimit.MaxBlock/time.Second))) * time.Second, true
	}
	at, err := http.ParseTime(value)
	if err != nil {
		return 0, false
	}
	return max(at.Sub(now), 0), true
}
