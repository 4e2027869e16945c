package slidelimit

import (
	"sync"
	"sync/atomic"
	"time"
)

// Result is the outcome of one call to Allow, AllowN or Peek. A denial is a
// Result with Allowed false, not an error.
//
// With several limits, the fields other than Allowed and Statuses describe
// the deciding limit: on a denial, the denying limit that takes longest to
// admit the request; otherwise the limit with the fewest units left.
type Result struct {
	// Allowed reports whether the request was admitted (for Peek: whether a
	// request of cost 1 would be).
	Allowed bool
	// Limit is the deciding limit.
	Limit Limit
	// Remaining is how many units the deciding limit has left in its window
	// after this decision.
	Remaining int
	// RetryAfter is how long until the same request would be admitted;
	// zero when Allowed, except on a Shadow Result.
	RetryAfter time.Duration
	// ResetAfter is how long until the deciding limit's window holds no
	// units, so that its whole quota is available again.
	ResetAfter time.Duration
	// Statuses holds one Status per limit, in the order of the limits that
	// decided (the limiter's, or those given to AllowLimits). It is nil
	// when Fallback is set, but for a Local one.
	Statuses []Status
	// Fallback reports that Redis could not be asked, and the decision was
	// made by the limiter's FailurePolicy. The call that returned the Result
	// also returned an error wrapping ErrUnavailable. A fallback Result but
	// a Local one claims no quota: header writers send only Retry-After on
	// its denial.
	Fallback bool
	// Local reports a Fallback decided in this process by FailLocal, on
	// this process's share of each of the call's limits: Limit, Remaining,
	// RetryAfter, ResetAfter and Statuses describe those shares, and a
	// denial is a denial (HTTP 429, gRPC ResourceExhausted), with header
	// fields claiming the shares.
	Local bool
	// Shadow reports that the limits denied the request and the limiter,
	// in shadow mode (WithShadow), admitted it anyway: Allowed is true and
	// nothing was recorded. The other fields describe the denial, so an
	// observer can tell which limit would have denied and for how long. A
	// shadow Result claims no quota: header writers send no field for it.
	Shadow bool
	// Cached reports that the denial came from the limiter's deny cache
	// (WithDenyCache) without asking Redis: the identity was denied a request
	// of at most this cost before, and its RetryAfter has not passed yet.
	// The Result is that denial's, with RetryAfter and ResetAfter counted
	// down on the local clock.
	Cached bool

	// d holds the memory of a decision Redis made: the array behind
	// Statuses, what Refund needs, and room for the header fields. Nil
	// for Fallback Results and those made by hand.
	d *decision
}

// Status is the state of one limit after a decision.
type Status struct {
	// Limit is the limit described.
	Limit Limit
	// Level is, for a decision of a tenant's tree (AllowTree), the
	// Identity of the level the limit counts; empty otherwise.
	Level string
	// Remaining is how many units the limit has left in its window.
	Remaining int
	// RetryAfter is how long until this limit alone would admit the
	// request; zero if it admits it now.
	RetryAfter time.Duration
	// ResetAfter is how long until the limit's window holds no units.
	ResetAfter time.Duration
}

// inlineStatuses is how many Statuses a decision holds without an
// allocation of their own.
const inlineStatuses = 2

// decision is the memory of one decision, allocated in one piece, so that
// an admitted request costs one allocation beyond Redis's transport: the
// Statuses of its Result, what Refund needs, and the header fields that
// Headers writes for it. Copies of the Result share it; nothing in it
// changes once the Result is returned, but for the header scratch, which
// the first writer claims.
type decision struct {
	statuses [inlineStatuses]Status
	admitted admission // set when the request was admitted and recorded
	fields   fieldScratch
}

// newDecision returns a decision and a Statuses slice of n in it (or of
// its own for more than inlineStatuses limits). The slice's capacity is
// its length, so an append by the caller copies.
func newDecision(n int) (*decision, []Status) {
	d := new(decision)
	if n <= inlineStatuses {
		return d, d.statuses[:n:n]
	}
	return d, make([]Status, n)
}

// localHold is where a request FailLocal admitted holds places in flight:
// the log of the identities ids in lims.
type localHold struct {
	lims *localLimits
	ids  []string
}

// admission identifies what one admitted request recorded, for Settle,
// Refund, Release and Renew.
type admission struct {
	from  *Limiter   // nil unless admitted by Redis
	local *localHold // for one admitted by FailLocal: the places it holds in flight
	who   string     // whose deny cache entries a settlement clears
	id    string
	n     int          // the units it was admitted for
	cost  atomic.Int64 // the units recorded, as last settled
	// lo and hi bound the units an exact log may hold for it: cost, unless
	// a settle failed after its script may have run (a lost reply), which
	// leaves either its old cost or its target.
	lo, hi atomic.Int64
	set    *limitSet // the limits that admitted it
	keys   []string  // the keys it was decided on
	at     time.Time // when it was decided, on the limiter's clock (clockNow)
	// until is when it has left every window and lease it counts in, on
	// the limiter's clock: at and its longest window (and step), moved
	// later by a Shift or a Renew that landed. A settlement kept to retry
	// (replay.go) is dropped then. Guarded by mu.
	until time.Time
	// mu orders its settlements: one runs at a time, and a newer one
	// supersedes one kept to retry.
	mu sync.Mutex
}
