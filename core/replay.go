package slidelimit

import (
	"context"
	"errors"
	"sync"
	"time"
)

// A settlement (Settle, Refund, Release or Shift) that fails because Redis
// cannot take it is kept and retried in the background, so that an outage
// does not strand a reservation (an estimate never settled keeps its whole
// cost for its window) or a place in flight (held until its lease ends).
// The limiter that recorded the request keeps it, the newest settlement of
// each request only (one made later supersedes it, whether it lands or not,
// so an older target never lands after a newer one), and retries it until
// it lands or the request has left every window it counts in, when it no
// longer matters. At most maxReplays wait at once; one past that is
// dropped. Each outcome is counted and logged once an episode ends. A
// process that exits meanwhile loses what it kept: those requests keep
// their recorded cost until their windows pass, and their places until
// their leases end, as before.

// maxReplays is how many settlements a limiter keeps to retry at once:
// about 200 bytes each, so at most about 2 MB.
const maxReplays = 10_000

// Replay pacing: the first retry comes replayFirst after a failure, each
// next one twice as late, up to replayMost.
const (
	replayFirst = 100 * time.Millisecond
	replayMost  = 5 * time.Second
)

// replay is one settlement to retry: settle's arguments.
type replay struct {
	gen   uint64   // which settlement this is, among those kept
	via   *Limiter // the limiter it was called on, whose timeout it runs within
	cost  int
	lease string
	shift int64
	what  string
	until time.Time // when the request has left every window it counts in
}

// replays is a limiter's settlements to retry. It is safe for concurrent
// use.
type replays struct {
	mu      sync.Mutex
	waiting map[*admission]replay
	gen     uint64 // the last replay's gen
	running bool   // a goroutine retries them

	// Counts since the last report: landed, left every window first,
	// dropped for want of room.
	landed, expired, dropped int64
}

// keep keeps rp for the request a, in place of any it kept for a, and
// starts retrying if nothing does. l is the limiter that recorded it.
func (q *replays) keep(l *Limiter, a *admission, rp replay) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.waiting == nil {
		q.waiting = map[*admission]replay{}
	}
	if _, ok := q.waiting[a]; !ok && len(q.waiting) >= maxReplays {
		q.dropped++
		return
	}
	q.gen++
	rp.gen = q.gen
	q.waiting[a] = rp
	if !q.running {
		q.running = true
		if l.outage.log != nil {
			l.outage.log.Warn("slidelimit: a settlement Redis could not take is kept and retried until it lands or its request leaves its windows",
				"op", rp.what)
		}
		go q.run(l)
	}
}

// cancel forgets what it kept for a: a newer settlement of a supersedes
// it. The caller holds a.mu.
func (q *replays) cancel(a *admission) {
	q.mu.Lock()
	delete(q.waiting, a)
	q.mu.Unlock()
}

// pending returns how many settlements wait to be retried.
func (q *replays) pending() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.waiting)
}

// run retries the settlements l keeps until none is left, then reports
// what came of them and returns.
func (q *replays) run(l *Limiter) {
	wait := replayFirst
	for {
		time.Sleep(wait)
		wait = min(2*wait, replayMost)
		q.mu.Lock()
		todo := make(map[*admission]replay, len(q.waiting))
		for a, rp := range q.waiting {
			todo[a] = rp
		}
		q.mu.Unlock()
		for a, rp := range todo {
			if q.retry(a, rp) {
				wait = replayFirst // Redis answers again: the rest soon
			}
		}
		q.mu.Lock()
		if len(q.waiting) == 0 {
			q.running = false
			landed, expired, dropped := q.landed, q.expired, q.dropped
			q.landed, q.expired, q.dropped = 0, 0, 0
			q.mu.Unlock()
			if l.outage.log != nil {
				l.outage.log.Info("slidelimit: the settlements Redis could not take are settled",
					"landed", landed, "left_their_windows", expired, "dropped", dropped)
			}
			return
		}
		q.mu.Unlock()
	}
}

// retry runs rp once if it is still the one kept for a, and reports
// whether it landed.
func (q *replays) retry(a *admission, rp replay) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	q.mu.Lock()
	if kept, ok := q.waiting[a]; !ok || kept.gen != rp.gen {
		q.mu.Unlock()
		return false // superseded, or settled meanwhile
	}
	if a.from.clockNow(time.Now()).After(rp.until) {
		delete(q.waiting, a)
		q.expired++
		q.mu.Unlock()
		return false
	}
	q.mu.Unlock()
	err := rp.via.run(context.Background(), a, rp.cost, rp.lease, rp.shift, rp.what)
	if err != nil && errors.Is(err, ErrUnavailable) {
		return false
	}
	q.mu.Lock()
	if q.waiting[a].gen == rp.gen {
		delete(q.waiting, a) // landed, or failed for good (another error)
		if err == nil {
			q.landed++
		}
	}
	q.mu.Unlock()
	return err == nil
}
