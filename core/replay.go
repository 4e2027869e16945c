package slidelimit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/slidelimit/slidelimit/core/internal/script"
)

// A Settle, Refund or Release that fails with ErrUnavailable is kept by the
// limiter that admitted the request and retried until it lands or the
// request has left every window and lease it counts in (see Settle and
// "Settlements across an outage" in the README). This file is that queue:
// one kept settlement per request, at most maxReplays of them, retried in
// the background (run) or at once (FlushSettlements).

// maxReplays is how many settlements a limiter keeps to retry at once:
// about 200 bytes each, so at most about 2 MB. One more is dropped and
// counted.
const maxReplays = 10_000

// Replay pacing: the first retry comes replayFirst after a failure, each
// next one twice as late, up to replayMost; a settlement that lands brings
// the next retry back to replayFirst.
const (
	replayFirst = 100 * time.Millisecond
	replayMost  = 5 * time.Second
)

// replay is one kept settlement: what settle runs again.
type replay struct {
	via  *Limiter // the limiter it was called on, within whose timeout it runs
	cost int      // the cost to settle to; below 0: left as it is (a Release)
	what string   // "settle", "refund" or "release", for errors
}

// kept reports whether a settlement named what is kept when it fails with
// ErrUnavailable: Settle, Refund and Release. A Renew that comes too late
// is moot, and a Shift is not safe to run twice (one whose reply was lost
// would move the request twice).
func kept(what string) bool {
	return what == "settle" || what == "refund" || what == "release"
}

// merge returns the settlement that carries both rp, kept, and a newer one
// of the same request to cost (below 0: none) named what: the newer cost
// if it names one, else the kept one; every kept settlement releases.
func (rp replay) merge(via *Limiter, cost int, what string) replay {
	if cost < 0 {
		cost = rp.cost
	}
	return replay{via: via, cost: cost, what: what}
}

// replays is a limiter's kept settlements. It is safe for concurrent use.
// Lock order: an admission's mu, then replays.mu.
type replays struct {
	mu      sync.Mutex
	waiting map[*admission]replay
	running bool // a goroutine retries them (run)
	open    bool // something was kept or dropped since the last report

	// What came of the settlements kept since the last report: landed
	// (retried, or carried by a newer settlement of the request), left
	// every window first, dropped for want of room.
	landed, expired, dropped int64
}

// take removes and returns what is kept for a: a newer settlement of a
// takes it over. The caller holds a.mu.
func (q *replays) take(a *admission) (replay, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	rp, ok := q.waiting[a]
	if ok {
		delete(q.waiting, a)
	}
	return rp, ok
}

// keep keeps rp for a, which the limiter l admitted, and starts retrying
// if nothing does; one past maxReplays is dropped. The caller holds a.mu.
func (q *replays) keep(l *Limiter, a *admission, rp replay) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.open && l.outage.log != nil {
		l.outage.log.Warn("slidelimit: settlements Redis could not take are kept and retried until they land or their requests leave their windows",
			"op", rp.what)
	}
	q.open = true
	if len(q.waiting) >= maxReplays {
		q.dropped++
		return
	}
	if q.waiting == nil {
		q.waiting = map[*admission]replay{}
	}
	q.waiting[a] = rp
	if !q.running {
		q.running = true
		go q.run(l)
	}
}

// landedNow counts a kept settlement that a newer settlement of its
// request carried, and reports if none is left.
func (q *replays) landedNow(l *Limiter) {
	q.mu.Lock()
	q.landed++
	report := q.drained()
	q.mu.Unlock()
	report(l)
}

// drained returns what reports the counts if nothing is kept any more
// and something was since the last report, and resets them; else a func
// that does nothing. The caller holds q.mu and calls it after unlocking.
func (q *replays) drained() func(*Limiter) {
	if len(q.waiting) > 0 || !q.open {
		return func(*Limiter) {}
	}
	landed, expired, dropped := q.landed, q.expired, q.dropped
	q.landed, q.expired, q.dropped, q.open = 0, 0, 0, false
	return func(l *Limiter) {
		if l.outage.log != nil {
			l.outage.log.Info("slidelimit: the settlements Redis could not take are settled",
				"landed", landed, "left_their_windows", expired, "dropped", dropped)
		}
	}
}

// pending returns how many settlements wait to be retried.
func (q *replays) pending() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.waiting)
}

// run retries the settlements l keeps, paced, until none is left.
func (q *replays) run(l *Limiter) {
	wait := replayFirst
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		<-t.C
		landed, _ := q.round(context.Background(), l)
		q.mu.Lock()
		if len(q.waiting) == 0 {
			q.running = false
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
		wait = min(2*wait, replayMost)
		if landed {
			wait = replayFirst // Redis answers again: the rest soon
		}
		t.Reset(wait)
	}
}

// round tries each kept settlement once, and stops at the first that
// Redis cannot take (it is still unavailable). It reports whether one
// landed, and the first failure.
func (q *replays) round(ctx context.Context, l *Limiter) (landed bool, err error) {
	q.mu.Lock()
	todo := make([]*admission, 0, len(q.waiting))
	for a := range q.waiting {
		todo = append(todo, a)
	}
	q.mu.Unlock()
	for _, a := range todo {
		ok, err := q.retry(ctx, l, a)
		if err != nil {
			return landed, err
		}
		landed = landed || ok
	}
	return landed, nil
}

// retry runs what is kept for a, if anything still is, and reports
// whether it landed, or the ErrUnavailable that kept it. One whose request
// has left every window and lease it counts in is dropped instead.
func (q *replays) retry(ctx context.Context, l *Limiter, a *admission) (bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	q.mu.Lock()
	rp, ok := q.waiting[a]
	if !ok {
		q.mu.Unlock()
		return false, nil // carried by a newer settlement, or retried meanwhile
	}
	if l.clockNow(time.Now()).After(a.until) {
		delete(q.waiting, a)
		q.expired++
		report := q.drained()
		q.mu.Unlock()
		report(l)
		return false, nil
	}
	q.mu.Unlock()
	if _, ok := ctx.Deadline(); !ok && rp.via.cfg.timeout == 0 {
		// A limiter without a timeout leaves it to the caller's context:
		// a retry of its own gives up as late as it would wait.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, replayMost)
		defer cancel()
	}
	err := rp.via.run(ctx, a, rp.cost, script.LeaseRelease, 0, rp.what)
	if err != nil && errors.Is(err, ErrUnavailable) {
		return false, err
	}
	// Landed (ErrPastHorizon too: the script ran, and the limits that
	// still knew the request took it).
	q.mu.Lock()
	delete(q.waiting, a)
	q.landed++
	report := q.drained()
	q.mu.Unlock()
	report(l)
	return true, nil
}

// FlushSettlements retries at once the settlements l keeps (see Settle: a
// Settle, Refund or Release of a request l admitted that failed with
// ErrUnavailable is kept and retried in the background), and again every
// 100 ms until none is left or ctx ends. Call it before a process exits,
// with a deadline, so that what an outage left pending lands if Redis
// answers again in time: whatever is still kept when the process exits is
// lost, and those requests keep their recorded cost until their windows
// pass, and their places in flight until their leases end.
//
// It returns nil once l keeps nothing, at once if it kept nothing. If ctx
// ends first, the error wraps ErrUnavailable and ctx's error, and says how
// many are still kept; the background retries go on. It is safe for
// concurrent use.
func (l *Limiter) FlushSettlements(ctx context.Context) error {
	t := time.NewTimer(replayFirst)
	defer t.Stop()
	for {
		_, err := l.replay.round(ctx, l)
		n := l.replay.pending()
		if n == 0 {
			return nil
		}
		if err == nil && ctx.Err() == nil {
			continue // more were kept meanwhile: try them too
		}
		if err == nil {
			err = ctx.Err()
		}
		t.Reset(replayFirst)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %d settlements still kept to retry: %w (last: %w)", ErrUnavailable, n, context.Cause(ctx), err)
		case <-t.C:
		}
	}
}
