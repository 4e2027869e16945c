package slidelimit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/slidelimit/slidelimit/core/internal/script"
)

// Settle corrects an admitted request to its actual cost, at the time it
// was admitted, and releases the places it holds in flight (InFlight
// limits). It is how a cost known only after the response is counted, as
// an LLM's tokens are: admit an estimate with AllowN (as large as the
// request may cost, such as its max_tokens), then settle the actual cost:
//
//	res, err := lim.AllowN(ctx, key, maxTokens)
//	… // serve the request
//	err = lim.Settle(ctx, res, usage.TotalTokens)
//
// Fewer units give the rest back. More record the excess at the
// admission's time: a window may then hold more than its quota until the
// excess leaves it, every decision meanwhile is denied and says so
// (Remaining 0, and a RetryAfter for when enough has left), and the
// overshoot is bounded by what the requests in flight may exceed their
// estimates by. The result is exact for exact limits and exact to the
// step for stepped ones. An exact log keeps at most its newest units of
// the largest quota counted in it; a window reaching back to a unit it
// dropped counts as full.
//
// Settling is retry-safe: settling twice to the same cost changes nothing
// the second time, and a settle lands on the cost it names whatever came
// before, even a settle that failed with ErrUnavailable after it may have
// run (a lost reply): the Result remembers both costs that one may have
// left, and the next settle corrects from either. A request that is never
// settled keeps its estimate, which it was admitted for; its places in
// flight end with their lease.
//
// A Settle, Refund or Release that fails with ErrUnavailable is not lost:
// the limiter that admitted the request keeps it, the newest of each
// request only, and retries it in the background (from 100 ms after the
// failure, then twice as late each time, up to 5 s) until it lands or the
// request has left every window and lease it counts in, when it no longer
// matters. A later Settle, Refund or Release of the same Result carries
// the kept one (its cost, unless it names one), so an older settlement
// never lands after a newer one. At most 10,000 are kept per limiter; one
// more is dropped. What came of them (landed, left their windows, dropped)
// is logged once none is left (WithLogger). FlushSettlements lands them
// at once, for a process about to exit: one that exits with settlements
// still kept loses them, and their requests keep their recorded cost until
// their windows pass and their places in flight until their leases end.
//
// Settling a Result that was not admitted, or was a Fallback, does
// nothing; nor does a request the window has let go. A stepped limit finds
// the request for the shorter of its window and 15 minutes after its
// admission, whatever the identity admits meanwhile: the settle of an
// older one that still counts there returns ErrPastHorizon (its other
// limits take it), never a silent nil.
// The name follows golang.org/x/time/rate, whose Reservation is admitted
// ahead of its use: here the Result of AllowN is the reservation, and
// Settle its correction. Settle(ctx, r, 0) is Refund.
//
// actual must be at least 0. Errors wrap ErrUnavailable, ErrInvalidCost or
// ErrPastHorizon.
func (l *Limiter) Settle(ctx context.Context, r Result, actual int) error {
	if actual < 0 {
		return fmt.Errorf("%w: settled cost %d is below 0", ErrInvalidCost, actual)
	}
	return l.settle(ctx, r, actual, script.LeaseRelease, 0, "settle")
}

// Refund removes an admitted request's units from every log it was
// recorded in, and so from every limit's count, as if it had never been
// made, so that, for example, requests that fail need not count; and it
// releases the places the request holds in flight. Refunding twice, or a
// Result that was not admitted or was a Fallback, does nothing; a retry of
// a refunded request's id is a new request. A stepped limit (see
// Limit.Step) finds the request for the shorter of its window and 15
// minutes after its admission; an older one that still counts there is
// not refunded there, and Refund returns ErrPastHorizon. The Result knows the
// limiter that recorded it, and so its keys: it is refunded where it was
// recorded even if l is another limiter on the same client, within l's
// own timeout (WithTimeout), as are Settle, Release, Renew and Shift. One
// that fails with ErrUnavailable is kept and retried, as Settle says.
// Errors wrap ErrUnavailable or ErrPastHorizon.
func (l *Limiter) Refund(ctx context.Context, r Result) error {
	return l.settle(ctx, r, 0, script.LeaseRelease, 0, "refund")
}

// Release gives back the places an admitted request holds in flight
// (InFlight limits), leaving its cost as it is. Releasing twice does
// nothing. One that fails with ErrUnavailable is kept and retried, as
// Settle says; one made while a Settle of the request is kept carries it,
// and may then return ErrPastHorizon as that Settle would. Errors wrap
// ErrUnavailable or ErrPastHorizon.
func (l *Limiter) Release(ctx context.Context, r Result) error {
	return l.settle(ctx, r, -1, script.LeaseRelease, 0, "release")
}

// Renew extends the places an admitted request holds in flight, for a call
// that outlasts its lease: each lease ends its length from now, the
// longest Window of the request's enforced in-flight limits (of its shadow
// ones if it has none; see Limit.InFlight). A lease that ended already is not
// renewed: Renew then returns an error wrapping ErrLeaseEnded, and the
// request holds no place (another may have taken it). Errors wrap
// ErrUnavailable otherwise; a Renew that fails is not kept to retry (one
// that comes late is moot).
func (l *Limiter) Renew(ctx context.Context, r Result) error {
	if r.d == nil || r.d.admitted.set == nil {
		return nil
	}
	lease := leaseOf(r.d.admitted.set.limits)
	if lease == 0 {
		return nil
	}
	return l.settle(ctx, r, -1, fmt.Sprint(lease.Microseconds()), 0, "renew")
}

// Shift moves an admitted request's units later by d, as if it had been
// admitted d later: for a request that reached its destination d after
// its admission, so that the limits count it when the destination did. A
// partner that counts arrivals in an exact window of its own then sees at
// most the quota in any window, however late a request leaves (a first
// request's dial, a host too busy to send): httplimit.Transport shifts a
// request whose response comes late to when it came. An exact limit moves it
// exactly; a stepped one by whole steps, rounded up, to no later than the
// step after the one Shift is called in. d of zero or less, or a Result
// not admitted, does nothing. Errors wrap ErrUnavailable or ErrPastHorizon;
// a Shift that fails is not kept to retry, for one whose reply was lost
// may have run, and a second would move the request twice.
func (l *Limiter) Shift(ctx context.Context, r Result, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	return l.settle(ctx, r, -1, script.LeaseKeep, d.Microseconds(), "shift")
}

// settle runs the settle script on the request r admitted: to cost units
// (below 0: left as they are), with lease (script.LeaseKeep,
// script.LeaseRelease or the µs to renew for), moving its units later by
// shift µs. what names the operation in errors.
func (l *Limiter) settle(ctx context.Context, r Result, cost int, lease string, shift int64, what string) error {
	if r.d == nil {
		return nil
	}
	a := &r.d.admitted
	if a.local != nil && lease == script.LeaseRelease {
		a.local.lims.release(a.local.ids, a.id) // FailLocal's places in flight; its counts are the process's
	}
	if a.from == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	from := a.from
	switch {
	case what == "renew":
		// A renewed lease ends a lease from now: a settlement kept to
		// retry is kept until then at least.
		a.until = maxTime(a.until, from.clockNow(time.Now()).Add(leaseOf(a.set.limits)))
	case what == "shift":
		// Its units count later: by the shift, and a step more at most.
		a.until = a.until.Add(time.Duration(shift)*time.Microsecond + longestStep(a.set.limits))
	}
	if !kept(what) {
		return l.run(ctx, a, cost, lease, shift, what)
	}
	// A settlement kept to retry is carried by this newer one, which
	// lands it or is kept in its place (replay.go): never one after the
	// other.
	rp := replay{via: l, cost: cost, what: what}
	old, took := from.replay.take(a)
	if took {
		rp = old.merge(l, cost, what)
	}
	err := l.run(ctx, a, rp.cost, lease, shift, what)
	switch {
	case err != nil && errors.Is(err, ErrUnavailable):
		from.replay.keep(from, a, rp)
	case took:
		from.replay.landedNow(from)
	}
	return err
}

// maxTime returns the later of a and b.
func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// longestStep returns the longest Step of limits (0: all exact).
func longestStep(limits []Limit) time.Duration {
	var step time.Duration
	for _, l := range limits {
		step = max(step, l.Resolution())
	}
	return step
}

// run runs the settle script once for the request a admitted, as settle
// describes, on the client that recorded it. The caller holds a.mu.
func (l *Limiter) run(ctx context.Context, a *admission, cost int, lease string, shift int64, what string) error {
	from := a.from
	recorded := int(a.cost.Load())
	if cost >= 0 && cost < recorded {
		// Units given back: the limiter that recorded them and the one
		// giving them back forget their denials of the identity.
		for _, lim := range []*Limiter{from, l} {
			if lim.deny != nil {
				lim.deny.forget(a.who)
			}
		}
	}
	// One call, whatever the correction: no log's work grows with it.
	lo, hi := int(a.lo.Load()), int(a.hi.Load())
	args := a.set.plan.SettleArgs(a.id, a.at.UnixMicro(), a.n, lo, hi, cost, lease, from.now(), shift)
	var leases, missed int
	// On the client that recorded it, within this limiter's own timeout:
	// the call is l's, whatever limiter admitted the request.
	err := from.rt.RunFor(ctx, l.cfg.timeout, func(ctx context.Context) error {
		reply, err := script.Settle.Run(ctx, from.client, a.keys, args...).Int64Slice()
		if err == nil {
			_, leases, missed, err = script.Settled(reply)
		}
		return err
	})
	if err != nil {
		if cost >= 0 {
			// It may have run: the next settle lands on its own cost from
			// either outcome.
			a.lo.Store(int64(min(lo, cost)))
			a.hi.Store(int64(max(hi, cost)))
		}
		return fmt.Errorf("%w: %s script: %w", ErrUnavailable, what, err)
	}
	if cost >= 0 {
		a.cost.Store(int64(cost))
		a.lo.Store(int64(cost))
		a.hi.Store(int64(cost))
	}
	if what == "renew" && leases == 0 {
		return ErrLeaseEnded
	}
	if missed > 0 && (cost >= 0 || shift > 0) && recorded > 0 {
		// A stepped log forgot the request's id for its age while its
		// units still count: never a silent nil.
		if n := from.pastHorizon.Add(1); n&(n-1) == 0 && from.outage.log != nil {
			from.outage.log.WarnContext(ctx, "slidelimit: a settlement came after a stepped limit's horizon (the shorter of its window and 15 minutes)",
				"op", what, "times", n)
		}
		return fmt.Errorf("%w: %s of a request admitted %v ago, past a stepped limit's horizon (the shorter of its window and 15 minutes)",
			ErrPastHorizon, what, from.clockNow(time.Now()).Sub(a.at).Round(time.Millisecond))
	}
	return nil
}
