package script

import (
	"fmt"
	"slices"
	"strconv"
)

// Limit is one limit as the allow script reads it.
type Limit struct {
	// Quota is the most units the window may hold, or for an in-flight
	// limit the most requests in flight.
	Quota int
	// Window is the window's length in µs, or an in-flight limit's lease.
	Window int64
	// Step is the step in µs at which the limit counts, or 0 for a limit
	// counted exactly.
	Step int64
	// Shadow marks a limit that is counted and reported but never denies.
	Shadow bool
	// InFlight marks a limit on requests in flight (inflight.lua).
	InFlight bool
	// Requests marks a limit that counts requests, one each, rather than
	// their cost.
	Requests bool
	// Level is the index of the identity whose keys the limit counts,
	// among those of one decision: 0 but for a tenant's tree of several.
	Level int
}

// Part is one key of a decision: the log of one identity (Level) and one
// kind: Step 0 for the exact log, above 0 for the stepped log of that
// step, InFlightStep for the in-flight log. A stepped log's ids
// (stepped.lua) are a part of their own, IDs, right after the log's.
type Part struct {
	Level    int
	Step     int64
	Requests bool // it counts requests, one each, rather than their cost
	IDs      bool // the ids of the stepped log of the part before
}

// InFlightStep is the step of an in-flight part, as the scripts read it.
const InFlightStep = -1

// shortShift is where a short reply's reset starts (decide.lua): its
// remaining units are the bits below, so only a decision leaving fewer
// than 2^shortShift units gets the short reply, any other the array.
const shortShift = 20

// Plan is a list of limits compiled into the allow script's parts: one key
// per identity and kind of log, counted by the limits of that kind. A Plan
// is immutable and safe for concurrent use.
type Plan struct {
	parts []Part
	spec  []any // the parts as ARGV after cost, id and now
	order []int // order[k]: the index, among the limits, of the reply's k-th
	hash  any   // the script its lone command runs
	// short is the window of the plan's one limit, which a short reply
	// (Reply) implies; 0 for a plan of several limits or an in-flight one.
	short int64
	// leases[i] is the lease a request takes in part i if it is an
	// in-flight part (inflight.lua): the longest window of its enforced
	// limits, of its shadow ones if it has none.
	leases []int64
}

// NewPlan compiles limits. The limits of one identity and one kind of log
// share a part; the parts go by level, and within a level the exact log
// first, then the steps in the order the limits name them, then the
// in-flight log.
func NewPlan(limits []Limit) *Plan {
	p := &Plan{hash: allowHashArg}
	for _, l := range limits {
		part := partOf(l)
		if !slices.Contains(p.parts, part) {
			p.parts = append(p.parts, part)
		}
	}
	rank := func(s int64) int64 {
		switch s {
		case 0:
			return -2
		case InFlightStep:
			return 1
		}
		return 0
	}
	slices.SortStableFunc(p.parts, func(a, b Part) int {
		if a.Level != b.Level {
			return a.Level - b.Level
		}
		if a.Requests != b.Requests {
			if a.Requests {
				return 1
			}
			return -1
		}
		return int(rank(a.Step) - rank(b.Step))
	})
	var keys []Part
	for _, part := range p.parts {
		keys = append(keys, part)
		if part.Step > 0 {
			ids := part
			ids.IDs = true
			keys = append(keys, ids)
		}
		var idx []int
		for i, l := range limits {
			if partOf(l) == part {
				idx = append(idx, i)
			}
		}
		n := len(idx)
		if part.Requests {
			n = -n
		}
		p.spec = append(p.spec, part.Step, n)
		var lease, shadow int64
		for _, i := range idx {
			if limits[i].Shadow {
				shadow = max(shadow, limits[i].Window)
			} else {
				lease = max(lease, limits[i].Window)
			}
		}
		if lease == 0 {
			lease = shadow
		}
		p.leases = append(p.leases, lease)
		if part.Step > 0 {
			p.leases = append(p.leases, 0) // its ids'
		}
		for _, i := range idx {
			q := limits[i].Quota
			if limits[i].Shadow {
				q = -q
			}
			p.spec = append(p.spec, q, limits[i].Window)
		}
		p.order = append(p.order, idx...)
	}
	p.parts = keys
	if len(limits) == 1 && !limits[0].InFlight {
		p.short = limits[0].Window
	}
	if len(p.parts) == 1 || len(p.parts) == 2 && p.parts[1].IDs {
		switch step := p.parts[0].Step; {
		case step == 0:
			p.hash = exactHashArg
		case step > 0:
			p.hash = steppedHashArg
		}
	}
	return p
}

// partOf returns the part that counts l.
func partOf(l Limit) Part {
	if l.InFlight {
		return Part{Level: l.Level, Step: InFlightStep}
	}
	return Part{Level: l.Level, Step: l.Step, Requests: l.Requests}
}

// Parts returns the keys a decision under p takes, in order.
func (p *Plan) Parts() []Part { return p.parts }

// Limits returns how many limits p holds.
func (p *Plan) Limits() int { return len(p.order) }

// Command returns the allow script's command deciding a request of cost
// units recorded as id ("" to peek) at clock (µs as decimal digits, or ""
// for Redis TIME), on keys, one per part of Parts.
func (p *Plan) Command(keys []string, cost int, id, clock string) Command {
	cmd := NewCommand(len(keys), 3+len(p.spec))
	cmd[1] = p.hash
	for _, k := range keys {
		cmd = append(cmd, k)
	}
	cmd = append(cmd, cost, id, clock)
	return append(cmd, p.spec...)
}

// Status is one limit's state after a decision.
type Status struct {
	// Remaining is how many units the limit has left in its window.
	Remaining int
	// RetryAfter is how many µs until the limit alone admits the request.
	RetryAfter int64
	// ResetAfter is how many µs until the limit's window is empty.
	ResetAfter int64
}

// Decode reads the reply to a decision under p (as Reply returns it) into
// statuses, one per limit in the order given to NewPlan, and reports
// whether the request was admitted and whether it was a retried call.
func (p *Plan) Decode(reply []int64, statuses []Status) (allowed, duplicate bool, err error) {
	if len(reply) == 1 && p.short > 0 && len(statuses) == 1 && reply[0] >= 0 {
		// The short reply: admitted, not a retried call, admitting now;
		// the one limit's remaining units below 2^20, and above them the
		// µs its window stays full beyond a window.
		statuses[0] = Status{Remaining: int(reply[0] & (1<<shortShift - 1)), ResetAfter: p.short + reply[0]>>shortShift}
		return true, false, nil
	}
	if len(reply) != 2+3*len(p.order) || len(statuses) != len(p.order) {
		return false, false, fmt.Errorf("allow script: unexpected reply %v", reply)
	}
	for k, i := range p.order {
		v := reply[2+3*k:]
		statuses[i] = Status{Remaining: int(v[0]), RetryAfter: v[1], ResetAfter: v[2]}
	}
	return reply[0] == 1, reply[1] == 1, nil
}

// Lease actions of a settlement (settle.lua's ARGV[4]).
const (
	LeaseKeep    = ""
	LeaseRelease = "0"
)

// SettleArgs returns the settle script's ARGV correcting the request id,
// admitted at µs at (on the clock of clock, as the caller knows it) for n
// units and recorded under p at lo to hi units (one cost, unless a settle
// whose reply was lost may have run), to cost (below 0: left as it is), with
// lease, LeaseKeep, LeaseRelease or the µs to renew its leases for, from
// clock (µs as decimal digits, or "" for Redis TIME), and moving its units
// later by shift µs.
func (p *Plan) SettleArgs(id string, at int64, n, lo, hi, cost int, lease, clock string, shift int64) []any {
	args := make([]any, 0, 8+len(p.parts))
	to := ""
	if cost >= 0 {
		to = strconv.Itoa(cost)
	}
	var recorded any = hi
	if lo != hi {
		recorded = strconv.Itoa(lo) + ":" + strconv.Itoa(hi)
	}
	args = append(args, id, recorded, to, lease, clock, shift, at, n)
	for i, part := range p.parts {
		if part.IDs {
			continue // settle.lua takes a stepped log's ids with it
		}
		step := strconv.FormatInt(part.Step, 10)
		switch {
		case part.Requests:
			step += "r"
		case part.Step == InFlightStep:
			step += ":" + strconv.FormatInt(p.leases[i], 10) // the lease it took
		}
		args = append(args, step)
	}
	return args
}

// Settled reads the settle script's reply: the units the request's first
// exact or stepped part held before, how many leases it held, and how many
// stepped parts may have forgotten it (settle.lua).
func Settled(reply []int64) (units, leases, missed int, err error) {
	if len(reply) != 3 {
		return 0, 0, 0, fmt.Errorf("settle script: unexpected reply %v", reply)
	}
	return int(reply[0]), int(reply[1]), int(reply[2]), nil
}
