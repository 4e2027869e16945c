package model

import (
	"time"

	slidelimit "github.com/slidelimit/slidelimit/core"
)

// This file holds, in one place, every documented narrowing by which the
// reference model (spec_test.go) may differ from the plain promise "every
// limit counts every admission of the identity in its window, a retried id
// counts once, a refund gives back exactly its units". Each rule cites the
// words it models: the package's documentation, or the header of the
// script that states the protocol (core/internal/script/*.lua). When core
// narrows or widens a promise, change the rule here and nothing else.

// The exact log (exact.lua): "a sorted set with one member per admitted
// unit, scored with its admission time in µs: a request of id and cost c
// records id, id.."1", ..., id..(c-1)." Beside the units, "scored negative
// so that no eviction by time reaches them, the log keeps its records".

// exactHistory is the history (µs) an exact log keeps at a decision: its
// record's W, grown by the call's windows. exact.lua: "The log keeps W of
// history, so that a caller with a shorter window never evicts what a
// longer one counts", W being "the longest window counted in the log while
// it lives". A longer window than W sees only the history the log kept.
func exactHistory(recordW, callW int64) int64 { return max(recordW, callW) }

// exactKeeps is how many units an exact log keeps after an admission:
// "about its newest Q units (whole instants: at least Q, fewer than Q and
// the requests of its oldest instant), which is all that a limit of quota
// up to Q needs to decide exactly", Q being "the largest quota" counted in
// the log while it lives. An instant goes whole, so what the log keeps
// does not hang on the order of the ids within it (xlog.keep).
func exactKeeps(recordQ, callQ int) int { return max(recordQ, callQ) }

// exactFull reports whether an exact limit of window w counts as full at
// now because the log dropped units up to t: "#t<T> ... T is the admission
// time of the newest unit dropped. A window that still reaches back to T
// has lost count of them, so it counts as full until T leaves it." Its
// count is then at least its quota, and its RetryAfter and ResetAfter at
// least t + w - now.
func exactFull(t int64, hasT bool, now, w int64) bool { return hasT && t > now-w }

// exactLife is how long (ms) an exact log lives from the write that renews
// it, and exactRenews whether an admission at now renews a log whose
// record says it lives until e (ms): "E is the Unix ms (on the deciders'
// clock) until which the log lives ... it is renewed for two windows once
// less than one is left, so that an admission needs no PEXPIRE."
func exactLife(w int64) int64 { return 2 * ceilDiv(w, 1000) }

func exactRenews(e, now, w int64) bool { return e*1000-now < w }

// recordWrites says whether a decision writes an exact log's record when
// the call counts a longer window or a larger quota than it holds (grow),
// or, for an admission, when the log has less than a window to live.
// decide.lua: "a denied request, a peek and a retried call record nothing.
// A decision may still evict what left the history a log keeps, and write
// a log's records (the history it keeps) when the request counts a longer
// window or a larger quota than they hold." exact.lua's exact adds
// nothing and fills in nothing for "a retried call" it finds as it admits:
// a request of one exact part that fits, and whose id is there already,
// leaves the record as it was; every other retry writes it as a denial
// does.
func recordWrites(peek, admit, retryFits bool, parts int, grow, renew bool) bool {
	switch {
	case peek:
		return false
	case admit:
		return grow || renew
	case retryFits && parts == 1:
		return false
	}
	return grow
}

// A stepped log (stepped.lua) "counts units per step-long bucket (bucket b
// covers the µs b*step up to (b+1)*step)"; a limit counts the buckets from
// the one holding now - window on.

// steppedBucket is the bucket an admission at now goes to, in a log whose
// newest bucket is newest (-1 when it holds no units): "An admission goes
// to the bucket of now, or to the newest if another clock ran ahead: later,
// so never too early out of any window."
func steppedBucket(now, step, newest int64) int64 { return max(floorDiv(now, step), newest) }

// steppedIDHorizon is how long (µs) a stepped log of history w keeps a
// request's id after its admission: "an id is kept for H = min(W,
// HORIZON) after its admission, whatever the identity admits meanwhile"
// (HORIZON 15 minutes). Limiter.Settle: "A stepped limit finds the request
// for the shorter of its window and 15 minutes after its admission".
// ContextWithRequestID: "A stepped limit keeps an id for the shorter of its
// window and 15 minutes after the admission: a retry after that counts
// again."
func steppedIDHorizon(w int64) int64 { return min(w, (15 * time.Minute).Microseconds()) }

// steppedSweep is how many of the oldest ids due an admission sweeps at
// least, with the rest of the last one's instant: "An admission from D on
// sweeps the ids older than H, the oldest SWEEP at a time and whole
// instants (D stays due while more may be left); once it swept them all D
// is H/16 later".
const steppedSweep = 64

// steppedLogSize is a stepped log's length in bytes, fixed: "[0, HDR) a
// header of seven little-endian doubles", then "a ring of RING big-endian
// 48-bit counts" from RING0 (HDR 56, RING0 60, RING 1444), "Made whole at
// once, so Redis never grows it".
const steppedLogSize = 60 + 6*1444

// steppedLife is how long (ms) a stepped log of history w and step lives
// from the write that renews it, and steppedRenews whether a write at now
// renews a log that lives until e (ms): "E, the Unix ms (on the deciders'
// clock) until which it lives, renewed for two windows and a step once
// less than a window and a step is left." The header is written, and the
// log renewed when due, at an admission and at a decision (not a peek)
// that counts a longer window than it keeps; a peek's eviction writes the
// header with the history the peek counted (stepped.lua's stepped).
func steppedLife(w, step int64) int64 { return ceilDiv(2*w+step, 1000) }

func steppedRenews(e, now, w, step int64) bool { return e*1000-now < w+step }

// inflightLife is how long (ms) an in-flight log lives from an admission
// whose lease is d µs: inflight.lua's PEXPIRE of "math.ceil(lease / 1000)
// + 1" ms, never shortening it ("The log lives as long as its longest
// lease").
func inflightLife(d int64) int64 { return ceilDiv(d, 1000) + 1 }

// A retried id is looked for in every part. decide.lua: "a denied request,
// a peek and a retried call (its id is in a part already) record nothing";
// an exact part holds an id while it holds the id's own member (a request's
// first, which sorts before the others and is dropped first), a stepped
// part while the id is among its ids: surely for steppedIDHorizon after
// its admission, and until a sweep drops it.

// exactIDKept reports whether an exact log surely still holds the id of a
// request of cost units admitted under an exact limit of quota q, when at
// most later units were admitted into it since (at its time or after):
// the log keeps its newest Q >= q units, and the id's own member is the
// request's oldest. The concurrent modes' retry check relies on it.
func exactIDKept(cost, q, later int) bool { return later+cost <= q }

// resetForgets reports whether Reset by a limiter whose own limits are own
// forgets the stepped log of step (µs). Limiter.Reset: "it deletes the
// identity's exact log and the stepped logs of the steps of l's own limits
// (a stepped log of another step, used by AllowLimits, is left to
// expire)".
func resetForgets(own []slidelimit.Limit, step int64) bool {
	for _, l := range own {
		if l.Resolution().Microseconds() == step {
			return true
		}
	}
	return false
}

// localShare is FailLocal's share of a quota in one process of replicas:
// "a sliding-window log per identity that holds floor(quota/n) of each
// limit". Issue 29 item 5 makes the call's own limits decide ("FailLocal
// and the deny cache decide with the call's limits"), which is what the
// model holds the limiter to.
func localShare(quota, replicas int) int { return quota / replicas }

// localLogSlots is how finely FailLocal's log counts a window: it keeps a
// log per window, with admissions less than a 64th of the window apart in
// one entry stamped with the latest of them (core's localSlots), so that
// its memory does not grow with the quota. A limit may so count an
// admission up to a 64th of its window longer than it was made, and a
// window first counted after others starts from the log of one of them,
// at that log's resolution (localModel.slack).
const localLogSlots = 64

// The bounds on an identity's keys (issue 29: "every key of an identity
// stays within a bound stated per limit set").

// exactLogBound is the most members an exact log may hold when the
// largest exact quota ever counted in it is maxExactQuota: "about its
// newest Q units (whole instants: at least Q, fewer than Q and the
// requests of its oldest instant)". An instant holds at most Q units as
// admitted (each admission fits its limits), and up to twice that once
// settled to more (the checker settles to at most twice a cost and 2);
// each request of a unit or more is a member and, at a cost other than 1,
// a second; and two records ("#e…" and "#t…").
func exactLogBound(maxExactQuota int) int64 { return 2*(4*int64(maxExactQuota)+2) + 2 }

// keyBytesBound is the most bytes (MEMORY USAGE) a key may take: an exact
// log of members members (a skiplist member of an 8-byte id costs Redis
// about 90 bytes with its score and index entries), a stepped log of
// steppedLogSize bytes, a block. Measured on redis-server 7.0.15; the
// margins are generous.
func keyBytesBound(members int64) int64 { return 16<<10 + 128*members }

// ttlSlack is what the bounds on a key's life allow beyond the stated
// lives: the records' rounding to the millisecond, and the moment between
// the write and the reading of the TTL.
const ttlSlack = 2 * time.Second

// exactTTLBound is the longest time to live of an exact log whose longest
// exact window was longest: two windows (exactLife).
func exactTTLBound(longest time.Duration) time.Duration { return 2*longest + ttlSlack }

// steppedTTLBound is the longest time to live of the stepped log of step
// whose longest window was longest: two windows and a step (steppedLife).
func steppedTTLBound(longest, step time.Duration) time.Duration {
	return 2*longest + step + ttlSlack
}

// inflightBound is the most members an in-flight log may hold when the
// largest in-flight quota enforced on it is quota: each admission reads
// (and evicts) first, so it holds at most the quota's leases, and its
// estimate of a hold. A shadow in-flight limit "never denies": its leases
// are bounded by nothing but the requests a lease's window sees.
func inflightBound(quota int, shadow bool) int64 {
	if shadow {
		return 1 << 20
	}
	return int64(quota) + 1
}

// inflightTTLBound is the longest time to live of an in-flight log whose
// longest lease was longest: "The log lives as long as its longest lease"
// (and a millisecond, inflightLife).
func inflightTTLBound(longest time.Duration) time.Duration { return longest + ttlSlack }

// blockTTLBound is the longest time to live of an identity's block: the
// longest Block given, at most slidelimit.MaxBlock.
func blockTTLBound(block time.Duration) time.Duration {
	return min(block, slidelimit.MaxBlock) + ttlSlack
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// inflightHoldEstimate is an in-flight log's estimate of a hold after a
// release of a lease still held, h µs after its start (its end less its
// lease): "Each release's hold h (settle.lua) moves them an eighth of the
// way: H = floor((7H + h) / 8) and D = floor((7D + |h - H|) / 8), H before
// the move; the first makes H h and D 0."
func inflightHoldEstimate(est bool, hold, d, h int64) (int64, int64, bool) {
	if !est {
		return h, 0, true
	}
	dev := h - hold
	if dev < 0 {
		dev = -dev
	}
	return (7*hold + h) / 8, (7*d + dev) / 8, true
}

// inflightRetry is an in-flight limit's RetryAfter once its log holds an
// estimate of a hold (hold, d), from retry, the µs until the earliest
// lease ends, and f, from that lease's start and the hold to now: "f if it
// is still ahead, but no more than g (another holder may free first); if
// f has passed (the holder is late) but not by D, half of what is left of
// D, and of g; later still, half of g; each at least a millisecond", g =
// H / quota, and never past the earliest lease's end.
func inflightRetry(retry, f, hold, d, quota int64) int64 {
	g := hold / quota
	switch {
	case f > 0:
		return min(retry, f, max(g, 1000))
	case f+d > 0:
		return min(retry, max(floorDiv(min(f+d, g), 2), 1000))
	}
	return min(retry, max(g/2, 1000))
}

// pastHorizon reports whether a settlement at now of id, admitted at
// admitted, finds a stepped log of steps in s that forgot it for its age
// while its units still count: settle.lua counts a part that does not hold
// id while "the history the log counts still holds its bucket" and it is
// "older than the horizon", and Settle, Refund and Shift then return
// ErrPastHorizon ("a stepped log keeps a request's id for the shorter of
// its window and 15 minutes, and this one is older") when it was recorded
// at more than 0 units.
func pastHorizon(s *state, steps []int64, id string, admitted, now int64) bool {
	for _, step := range steps {
		g := s.s[step]
		if step <= 0 || g == nil || !g.exists || g.t <= 0 || g.holds(id) {
			continue
		}
		if floorDiv(admitted, step) >= max(g.o, floorDiv(now-g.w, step)) && now-admitted >= steppedIDHorizon(g.w) {
			return true
		}
	}
	return false
}
