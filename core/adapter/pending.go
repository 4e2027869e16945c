package adapter

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	slidelimit "github.com/slidelimit/slidelimit/core"
)

// Response is what an adapter knows of a request's response once the
// request has ended, the input of Flow.Settle.
type Response struct {
	// Status is the response's status code: HTTP's, or a gRPC call's
	// codes.Code.
	Status int
	// Header holds the response's header fields; nil where the framework
	// gives none (gRPC).
	Header http.Header
	// Body is the end of the body as the handler wrote it, before any
	// compression by an outer middleware: its last MaxBody bytes, or all of
	// it if shorter. It is nil for gRPC. It is valid only while the settle
	// function runs.
	Body []byte
	// Size is how many bytes of body were written in all: more than
	// len(Body) when its start was dropped.
	Size int64
}

// Pending is a request the flow admitted whose end the flow must learn: to
// settle it from its response (Flow.Settle), to refund it by status
// (RefundFailed, RefundSuccessful), or to release the places it holds in
// flight (slidelimit.InFlight). Flow.Pend returns it. The adapter writes
// the response's body to it while Captures, and ends it once, when the
// request has ended; a deferred Abort covers a handler that panics:
//
//	p := f.Pend(ctx, c, d)
//	defer p.Abort()
//	… // call the next handler, its body's bytes written to p if p.Captures()
//	p.End(status, header)
//
// Ending takes at most one Redis round trip: a refund is a settle to 0, and
// a settle releases the places in flight too. Until then, a request that
// holds places in flight renews their lease (slidelimit.Limiter.Renew)
// every third of the shortest in-flight Window among its limits, so that
// a request, or a streamed response, longer than its lease keeps its
// place for as long as it runs, while a process that dies lets its places
// go within a lease; a renewal's failure is reported when the request
// ends, as "<Name>: renew: …". A nil *Pending, the one of a request that
// owes nothing at its end, does nothing. A Pending is safe for concurrent
// use.
type Pending[C any] struct {
	f   *Flow[C]
	ctx context.Context
	c   C
	d   Decision

	inFlight bool // the request holds places in flight
	settles  bool // Settle applies: Redis decided, and the flow has one
	refunds  bool // a refund by status applies

	mu       sync.Mutex
	body     tail
	parts    int  // the parts yet to end: the handler's, and each Hold's
	ended    bool // End or Abort was called
	over     bool // the last part ended: the places in flight are owed back, never renewed again
	renewal  *time.Timer
	renewErr error // the first renewal's failure, reported at the end
	aborted  bool
	status   int
	header   http.Header
}

// Pend returns the Pending of the request c that Decide or Check admitted
// (d), or nil if it owes nothing at its end: it was not admitted, or was
// admitted by a Fallback that holds nothing (FailOpen), or holds no place
// in flight under a flow with no refund and no Settle. A request FailLocal
// admitted holds its places in flight in the process: it is released, never
// settled nor refunded. ctx is the request's context; ending it outlives
// ctx's cancellation.
func (f *Flow[C]) Pend(ctx context.Context, c C, d Decision) *Pending[C] {
	res := d.Result
	if d.Verdict != Admit || d.lim == nil || !res.Allowed || res.Shadow || res.Fallback && !res.Local {
		return nil
	}
	p := &Pending[C]{f: f, ctx: ctx, c: c, d: d, parts: 1}
	var lease time.Duration // the shortest lease among the places in flight
	for _, s := range res.Statuses {
		if s.Limit.InFlight {
			p.inFlight = true
			if lease == 0 || s.Limit.Window < lease {
				lease = s.Limit.Window
			}
		}
	}
	if !res.Fallback {
		p.settles = f.Settle != nil
		p.refunds = f.RefundFailed || f.RefundSuccessful
	}
	if !p.inFlight && !p.settles && !p.refunds {
		return nil
	}
	if p.inFlight && !res.Fallback {
		every := max(lease/3, time.Millisecond)
		p.mu.Lock() // the timer may fire before Pend returns
		p.renewal = time.AfterFunc(every, func() { p.renew(every) })
		p.mu.Unlock()
	}
	return p
}

// renew renews the request's places in flight, and again every interval
// while it runs. A lease that ended is not renewed again: the request no
// longer holds its place. The first failure is kept for finish to report
// on the request's goroutine, since the request's context C may not be
// used from this one.
func (p *Pending[C]) renew(every time.Duration) {
	p.mu.Lock()
	if p.over {
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	err := p.d.lim.Renew(context.WithoutCancel(p.ctx), p.d.Result)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.over { // ended meanwhile: its release, not this renewal, counts
		return
	}
	if err != nil && p.renewErr == nil {
		p.renewErr = err
	}
	if !errors.Is(err, slidelimit.ErrLeaseEnded) {
		p.renewal.Reset(every)
	}
}

// Captures reports whether the adapter must write the response's body to
// p: whether there is a settle function to read it.
func (p *Pending[C]) Captures() bool {
	return p != nil && p.settles
}

// Write keeps the last MaxBody bytes of what the response's body has
// written so far, for the settle function, when Captures; otherwise it
// keeps nothing. It never fails.
func (p *Pending[C]) Write(b []byte) (int, error) {
	if p.Captures() {
		p.mu.Lock()
		p.body.Write(b)
		p.mu.Unlock()
	}
	return len(b), nil
}

// End ends the request with its response's status and header fields
// (nil where the framework has none), in one Redis round trip at most:
//
//   - a request a refund setting gives back by its status is refunded
//     (slidelimit.Limiter.Refund);
//   - otherwise, a request Flow.Settle finds the actual cost of is settled
//     to it (slidelimit.Limiter.Settle), unless that is the cost it was
//     admitted for and it holds no place in flight;
//   - otherwise a request that holds places in flight releases them
//     (slidelimit.Limiter.Release).
//
// Each of these also releases the places in flight. The round trip runs
// without the cancellation of the request's context, since it is owed
// when the client is gone too, bounded by the limiter's timeout
// (slidelimit.WithTimeout). A failure goes to Hook as "<Name>: refund: …"
// ("settle", "release"). Only the first call of End and Abort counts.
func (p *Pending[C]) End(status int, header http.Header) {
	p.end(status, header, false)
}

// Abort ends the request without a response, as when its handler
// panicked: it releases the places the request holds in flight and leaves
// its cost as it was admitted. After End it does nothing, so that a
// deferred Abort is safe.
func (p *Pending[C]) Abort() {
	p.end(0, nil, true)
}

// Hold keeps the request from ending at End until the function it returns
// is called too, for a body the framework sends after the handler has
// returned, such as Fiber's body stream writer: End (or Abort) records the
// response's status and header fields, the function marks the end of the
// body, and the later of the two ends the request. Errors met when the
// function comes last go to Hook with C's zero value, since the framework
// may have reused the request's context by then. Call Hold before End;
// the function may be called more than once, and from any goroutine.
func (p *Pending[C]) Hold() (done func()) {
	if p == nil {
		return func() {}
	}
	p.mu.Lock()
	held := !p.ended
	if held {
		p.parts++
	}
	p.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			if held && p.leave() {
				var gone C
				p.finish(gone)
			}
		})
	}
}

// end records how the handler's part ended, and ends the request if no
// Hold is left.
func (p *Pending[C]) end(status int, header http.Header, aborted bool) {
	if p == nil {
		return
	}
	p.mu.Lock()
	if p.ended {
		p.mu.Unlock()
		return
	}
	p.ended, p.status, p.header, p.aborted = true, status, header, aborted
	p.mu.Unlock()
	if p.leave() {
		p.finish(p.c)
	}
}

// leave ends one part, and reports whether it was the last; then the
// renewals stop.
func (p *Pending[C]) leave() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.parts--
	if p.parts > 0 {
		return false
	}
	p.over = true
	if p.renewal != nil {
		p.renewal.Stop()
	}
	return true
}

// finish makes the one round trip the request owes, reporting a failure
// to Hook with c.
func (p *Pending[C]) finish(c C) {
	f, lim, res := p.f, p.d.lim, p.d.Result
	ctx := context.WithoutCancel(p.ctx)
	var what string
	var err error
	switch {
	case p.aborted:
		if p.inFlight {
			what, err = "release", lim.Release(ctx, res)
		}
	case p.refunds && f.refunded(p.status):
		what, err = "refund", lim.Refund(ctx, res)
	default:
		actual, ok := p.actual(c)
		switch {
		case ok && (actual != p.d.cost || p.inFlight):
			what, err = "settle", lim.Settle(ctx, res, actual)
		case p.inFlight:
			what, err = "release", lim.Release(ctx, res)
		}
	}
	p.mu.Lock()
	renewErr := p.renewErr
	p.mu.Unlock()
	if renewErr != nil {
		f.hook(ctx, c, fmt.Errorf("%s: renew: %w", f.Name, renewErr))
	}
	if err != nil {
		f.hook(ctx, c, fmt.Errorf("%s: %s: %w", f.Name, what, err))
	}
}

// actual asks Settle for the actual cost of the request c, if it applies.
func (p *Pending[C]) actual(c C) (int, bool) {
	if !p.settles {
		return 0, false
	}
	p.mu.Lock()
	r := Response{Status: p.status, Header: p.header, Body: p.body.Bytes(), Size: p.body.size}
	p.mu.Unlock()
	return p.f.Settle(c, r)
}

// refunded reports whether the refund settings give back a request that
// ended with status.
func (f *Flow[C]) refunded(status int) bool {
	failed := f.Failed
	if failed == nil {
		failed = HTTPFailed
	}
	bad := failed(status)
	return bad && f.RefundFailed || !bad && f.RefundSuccessful
}
