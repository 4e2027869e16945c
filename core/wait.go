package slidelimit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// ErrWouldExceedDeadline means Wait or WaitN returned at once, without
// waiting, because the request could not be admitted before the context's
// deadline: the limits' RetryAfter, or a Block in force, outlasts it. The
// errors returned wrap context.DeadlineExceeded too, so code that treats a
// timeout as a timeout keeps working.
var ErrWouldExceedDeadline = errors.New("slidelimit: wait would exceed the context deadline")

// maxWaitJitter is the most a waiter's wake-up is put off at random, so
// that the processes waiting on one identity do not all ask Redis at the
// same instant. It is also at most a hundredth of the deciding window.
const maxWaitJitter = 100 * time.Millisecond

// Wait blocks until identity may make one request, records it and returns
// its Result. It is WaitN(ctx, identity, 1).
func (l *Limiter) Wait(ctx context.Context, identity string) (Result, error) {
	return l.WaitN(ctx, identity, 1)
}

// WaitN blocks until every limit admits a request of cost n by identity,
// records it, and returns the admitting Result. It is AllowN for callers
// that would rather wait than be denied: the workers of a fleet that share
// a partner's quota, say. Waiting honours a Block of identity: no request
// is admitted until the block has ended.
//
// WaitN does not poll. The waiters of one Limiter and one identity in a
// process form one queue, served in order, whose head alone asks Redis:
// when the limits deny it, the queue sleeps for the denial's RetryAfter and
// a random fraction of the window on top (at most 100 ms), so that a freed
// unit costs Redis one decision per process rather than one per waiter,
// and processes woken by the same unit do not ask at the same instant.
// After each admission the head reads identity's block, and refunds the
// admission if a block is in force, so an admission that stands came
// before any block in Redis: an admitted request costs two Redis scripts,
// AllowN's and the block's read. A process asks for one decision at a time
// per identity.
//
// WaitN returns at once:
//   - with ctx.Err() when ctx ends while waiting, having recorded nothing
//     for this caller (a decision Redis was making for it is passed to the
//     next waiter of the same cost, or refunded), but for a caller whose
//     context carries an id of ContextWithRequestID: an admission Redis
//     made for it stays recorded under its id, for it is its own, and the
//     caller's retry with the same id is told it was admitted;
//   - with an error wrapping ErrWouldExceedDeadline and
//     context.DeadlineExceeded, and the denying Result, when ctx's
//     deadline comes before the RetryAfter of the denial or the end of the
//     block;
//   - with the errors of AllowN for an empty identity or an invalid cost.
//
// When Redis fails, the FailurePolicy decides as for AllowN: a Fallback
// admission is returned together with its error wrapping ErrUnavailable;
// a Fallback denial (FailClosed, or FailLocal's share used up) is waited
// out like any other, for its RetryAfter. A Fallback admission does not
// read the block: Redis has just failed. A FailLocal admission made for a
// caller that left, and taken by no other waiter, stays in the process's
// local count until its window passes, as a Refund of a Fallback does
// nothing: it errs toward denying.
//
// The admission is recorded at the moment Redis decides, and the request
// reaches its destination later. Where the other side counts arrivals in
// an exact window of its own, give the limit's window a margin larger than
// the spread of that delay (see the README's "Limiting your own outgoing
// calls").
func (l *Limiter) WaitN(ctx context.Context, identity string, n int) (Result, error) {
	if _, err := hashTag(identity); err != nil || n < 1 || n > l.own.minQuota {
		return l.AllowN(ctx, identity, n) // returns the error
	}
	if err := ctx.Err(); err != nil {
		return Result{Limit: l.cfg.limits[0]}, err
	}
	w := &waiter{n: n, ctx: ctx, done: make(chan waitReply, 1), ownID: ctx.Value(requestIDKey{}) != nil}
	w.deadline, _ = ctx.Deadline()
	q, refused := joinQueue(l, identity, w)
	if refused != nil {
		return refused.res, refused.err
	}
	select {
	case r := <-w.done:
		return r.res, r.err
	case <-ctx.Done():
		if q.leave(w) {
			return Result{Limit: l.cfg.limits[0]}, ctx.Err()
		}
		r := <-w.done // decided as ctx ended: the decision stands
		return r.res, r.err
	}
}

// waiter is one caller of WaitN.
type waiter struct {
	n        int
	ctx      context.Context
	ownID    bool      // ctx carries an id of ContextWithRequestID
	deadline time.Time // zero without one
	done     chan waitReply

	// Guarded by queues.mu.
	settled bool // a reply is in done, or the waiter left
}

// waitReply is what a waiter returns.
type waitReply struct {
	res Result
	err error
}

// queueKey names one queue: one Limiter, one identity.
type queueKey struct {
	l        *Limiter
	identity string
}

// waitQueue is the waiters of one Limiter and one identity in this
// process. Its runner goroutine lives while it has waiters; the queue is
// dropped with the last of them, so idle identities cost nothing.
type waitQueue struct {
	key  queueKey
	kick chan struct{} // wakes a pausing runner whose waiters all left

	// Guarded by queues.mu.
	waiters  []*waiter
	earliest time.Time // while pausing: when the head could be admitted
	denial   Result    // while pausing: the Result that made it pause

}

// queues holds every queue that has waiters.
var queues = struct {
	mu sync.Mutex
	m  map[queueKey]*waitQueue
}{m: make(map[queueKey]*waitQueue)}

// joinQueue adds w to the queue of l and identity, starting the queue if
// it has none, unless w's deadline comes before the paused queue could
// admit anyone: then it returns the refusal.
func joinQueue(l *Limiter, identity string, w *waiter) (*waitQueue, *waitReply) {
	key := queueKey{l, identity}
	queues.mu.Lock()
	defer queues.mu.Unlock()
	q := queues.m[key]
	if q != nil && !w.deadline.IsZero() && w.deadline.Before(q.earliest) {
		return q, &waitReply{q.denial, deadlineError(time.Until(q.earliest))}
	}
	if q == nil {
		q = &waitQueue{key: key, kick: make(chan struct{}, 1)}
		queues.m[key] = q
		go q.run()
	}
	q.waiters = append(q.waiters, w)
	return q, nil
}

// deadlineError is the error of a waiter refused because it would have to
// wait d.
func deadlineError(d time.Duration) error {
	return fmt.Errorf("%w (%w): the request could be admitted in %v at the earliest",
		ErrWouldExceedDeadline, context.DeadlineExceeded, d.Round(time.Millisecond))
}

// leave takes w out of q and reports true, unless a reply was given to w
// first. It wakes the runner when q is left without waiters.
func (q *waitQueue) leave(w *waiter) bool {
	queues.mu.Lock()
	defer queues.mu.Unlock()
	if w.settled {
		return false
	}
	w.settled = true
	q.remove(w)
	if len(q.waiters) == 0 {
		select {
		case q.kick <- struct{}{}:
		default:
		}
	}
	return true
}

// remove takes w out of q.waiters. queues.mu is held.
func (q *waitQueue) remove(w *waiter) {
	if i := slices.Index(q.waiters, w); i >= 0 {
		q.waiters = slices.Delete(q.waiters, i, i+1)
	}
}

// settle gives w its reply and takes it out of q, unless it left already.
// queues.mu is held.
func (q *waitQueue) settle(w *waiter, r waitReply) bool {
	if w.settled {
		return false
	}
	w.settled = true
	q.remove(w)
	w.done <- r
	return true
}

// run serves q's waiters in order until none is left.
func (q *waitQueue) run() {
	l, identity := q.key.l, q.key.identity
	for {
		queues.mu.Lock()
		if len(q.waiters) == 0 {
			delete(queues.m, q.key)
			queues.mu.Unlock()
			return
		}
		head := q.waiters[0]
		queues.mu.Unlock()

		// The decision is made for the queue, not for the head alone: if
		// the head leaves while Redis decides, an admission goes to the
		// next waiter. So it runs with the head's values but not its end.
		ctx := context.WithoutCancel(head.ctx)
		res, err := l.AllowN(ctx, identity, head.n)
		if err != nil && !res.Allowed && !res.Fallback {
			q.hand(head, waitReply{res, err}) // not reached: WaitN checked the input
			continue
		}
		if !res.Allowed {
			q.pause(res.RetryAfter, res)
			continue
		}
		// The block is read after the admission, not before: an admission
		// that stands then came before any block Redis holds, and one that
		// finds a block is refunded. Read first, a block recorded between
		// the read and the admission would let a request through.
		if !res.Fallback {
			if left, err := l.Blocked(ctx, identity); err == nil && left > 0 {
				_ = l.Refund(ctx, res) // best effort: the unit leaves with its window anyway
				q.pause(left, Result{Limit: res.Limit, RetryAfter: left})
				continue
			}
		}
		q.hand(head, waitReply{res, err})
	}
}

// hand gives an admission made for head to head or, if head left, to the
// next waiter of the same cost without an id of its own; with no such
// waiter, it is refunded. An admission recorded under head's own id
// (ContextWithRequestID) is head's alone: a retry of head with that id is
// told it was admitted, so giving it to another would admit two requests
// for one unit, and refunding it could race that retry. Nor does a waiter
// with its own id take another's: its retry would not find its id.
func (q *waitQueue) hand(head *waiter, r waitReply) {
	queues.mu.Lock()
	given := q.settle(head, r) || head.ownID
	for i := 0; !given && i < len(q.waiters); i++ {
		// Not to a waiter with an id of its own: its retry must find that
		// id recorded, not the head's.
		if w := q.waiters[i]; w.n == head.n && !w.ownID {
			given = q.settle(w, r)
		}
	}
	queues.mu.Unlock()
	if !given {
		_ = q.key.l.Refund(context.WithoutCancel(head.ctx), r.res) // best effort: the unit leaves with its window anyway
	}
}

// pause refuses the waiters whose deadline comes within retry, then sleeps
// for retry and a random jitter, or until every waiter has left.
func (q *waitQueue) pause(retry time.Duration, denial Result) {
	retry = max(retry, time.Millisecond)
	earliest := time.Now().Add(retry)
	queues.mu.Lock()
	q.earliest, q.denial = earliest, denial
	for _, w := range slices.Clone(q.waiters) {
		if !w.deadline.IsZero() && w.deadline.Before(earliest) {
			q.settle(w, waitReply{denial, deadlineError(retry)})
		}
	}
	empty := len(q.waiters) == 0
	queues.mu.Unlock()

	if !empty {
		t := time.NewTimer(retry + jitter(denial.Limit.Window))
	sleep:
		for {
			select {
			case <-t.C:
				break sleep
			case <-q.kick:
				queues.mu.Lock()
				empty := len(q.waiters) == 0
				queues.mu.Unlock()
				if empty {
					t.Stop()
					break sleep
				}
			}
		}
	}
	queues.mu.Lock()
	q.earliest, q.denial = time.Time{}, Result{}
	queues.mu.Unlock()
}

// jitter returns a random delay of at most a hundredth of window and at
// most maxWaitJitter.
func jitter(window time.Duration) time.Duration {
	span := min(window/100, maxWaitJitter)
	if span <= 0 {
		return 0
	}
	return rand.N(span)
}
