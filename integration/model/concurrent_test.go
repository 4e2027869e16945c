package model

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	slidelimit "github.com/slidelimit/slidelimit/core"
	"pgregory.net/rapid"
)

// The concurrent modes: limiters on Redis TIME, bursts from goroutines and
// from the several processes at once, windows that slide in real time,
// and on a private server stalls and killed connections. Nothing predicts
// one call's answer there; the invariants judge the whole history, in
// which an admission's time is known only as the interval of its call
// (Redis TIME and the wall clock are one clock on one host).

// shortCatalogue is what limits are made of where windows slide in real
// time.
var shortCatalogue = []slidelimit.Limit{
	slidelimit.Per(5, 200*time.Millisecond),
	slidelimit.Per(10, time.Second),
	slidelimit.Per(3, 500*time.Millisecond),
	slidelimit.Per(2000, 10*time.Second).Stepped(time.Second),
	slidelimit.Per(20, time.Second).Stepped(100 * time.Millisecond),
	slidelimit.Per(50, 2*time.Second),
	slidelimit.Per(1000, time.Second),
	slidelimit.Per(2000, 2*time.Second), // stepped by default: 1.388 ms steps
}

// cCall is one call of a concurrent round.
type cCall struct {
	allowOp
	Wait   bool          // WaitN instead of AllowN (own limits)
	Cancel time.Duration // a Wait leaves after this (0: a deadline of a second)
}

func (c cCall) String() string {
	s := c.allowOp.String()
	if c.Wait {
		s = fmt.Sprintf("cCall{allowOp: %s, Wait: true, Cancel: %s}", s, durString(c.Cancel))
	} else {
		s = fmt.Sprintf("cCall{allowOp: %s}", s)
	}
	return s
}

// record is one call of the history.
type record struct {
	c      cCall
	limits []slidelimit.Limit
	levels []string // the level of each limit, for a tenant's tree (levelsOf)
	units  int      // the units the quota check counts it at (judgeHistory)
	a, b   time.Time
	res    slidelimit.Result
	err    error
	stall  time.Duration // Redis was paused this long while the call ran
	healed time.Time     // connections were last killed then
}

// admitted reports whether Redis admitted the call (fresh or as a retry).
func (r *record) admitted() bool {
	return r.err == nil && r.res.Allowed && !r.res.Fallback && !r.res.Shadow && !r.res.Cached && !r.c.Peek
}

// history is a concurrent check's calls, and its refunds and settles.
type history struct {
	h        *harness
	records  []*record
	refunded map[string]bool          // logical requests refunded
	settles  map[string][]settleTrial // logical requests settled, released or refunded by settleRoundOp
	judged   map[string]int           // what the invariants judged, by kind, for the mode's tally
}

func newHistory(h *harness) *history {
	return &history{h: h, refunded: map[string]bool{}, settles: map[string][]settleTrial{}, judged: map[string]int{}}
}

// roundOp is a burst of calls made at once, with Redis paused for Pause
// meanwhile, or its connections killed after Kill, if set.
type roundOp struct {
	Calls   []cCall
	Pause   time.Duration
	Kill    time.Duration
	Migrate string // a Cluster's slot of this identity moves meanwhile, if set
}

func (o roundOp) String() string {
	parts := make([]string, len(o.Calls))
	for i, c := range o.Calls {
		parts[i] = "\n\t\t\t" + c.String() + ","
	}
	return fmt.Sprintf("roundOp{Pause: %s, Kill: %s, Migrate: %q, Calls: []cCall{%s\n\t\t}}", durString(o.Pause), durString(o.Kill), o.Migrate, strings.Join(parts, ""))
}

func (o roundOp) run(h *harness) {
	hist := h.hist
	var until time.Time
	if o.Pause > 0 {
		until = h.env.pause(o.Pause)
	}
	if o.Migrate != "" {
		migrateOp{Who: o.Migrate, Pause: time.Millisecond}.run(h)
	}
	recs := make([]*record, len(o.Calls))
	var wg sync.WaitGroup
	for i, c := range o.Calls {
		r := &record{c: c, limits: h.limitsOf(c.allowOp), levels: levelsOf(c.allowOp), stall: o.Pause, healed: h.env.healed}
		recs[i] = r
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			r.a = time.Now()
			if c.Wait {
				var cancel context.CancelFunc
				if c.Cancel > 0 {
					ctx, cancel = context.WithCancel(ctx)
					time.AfterFunc(c.Cancel, cancel)
				} else {
					ctx, cancel = context.WithTimeout(ctx, time.Second)
				}
				defer cancel()
				r.res, r.err = h.lims[c.Lim].WaitN(callCtx(ctx, c.Req, c.ID), c.Who, c.Cost)
			} else {
				r.res, r.err = h.invoke(ctx, c.allowOp)
			}
			r.b = time.Now()
		}()
	}
	if o.Kill > 0 {
		time.Sleep(o.Kill)
		h.env.kill()
		h.env.healed = time.Now()
	}
	wg.Wait()
	if !until.IsZero() {
		sleepUntil(until)
	}
	for _, r := range recs {
		h.use(call{who: r.c.Who, limits: r.limits, levels: r.levels})
		if r.c.ID && !slices.Contains(h.order, r.c.Req) {
			h.order = append(h.order, r.c.Req)
		}
		h.calls[r.c.Req] = &callRec{call: r.c.allowOp, res: r.res}
	}
	hist.records = append(hist.records, recs...)
	for _, r := range recs {
		hist.judged["calls"]++
		switch {
		case r.c.Tree != nil:
			hist.judged["tree calls"]++
		case len(r.limits) > 1:
			hist.judged["calls of several limits"]++
		}
		if recordLease(r) > 0 && r.admitted() {
			hist.judged["admissions in flight"]++
		}
	}
	if o.Migrate != "" {
		hist.judged["rounds during a migration"]++
	}
	hist.judgeCalls(recs)
	hist.judgeHistory()
	if h.failure == "" {
		hist.judgeStored(recs)
	}
}

// sleepOp lets real time pass, so that windows slide.
type sleepOp struct{ D time.Duration }

func (o sleepOp) String() string { return fmt.Sprintf("sleepOp{D: %s}", durString(o.D)) }
func (o sleepOp) run(*harness)   { time.Sleep(o.D) }

// refundPeekOp refunds the latest Result of call Of through limiter Via,
// alone, between two Peeks under the call's limits: each limit the
// request still surely counts in must have its units back. With Outage,
// every process is cut off from Redis for the Refund, which fails, and
// lands once the partition heals (FlushSettlements) before the second
// Peek.
type refundPeekOp struct {
	Of     string
	Via    int
	Outage bool
}

func (o refundPeekOp) String() string {
	if o.Outage {
		return fmt.Sprintf("refundPeekOp{Of: %q, Via: %d, Outage: true}", o.Of, o.Via)
	}
	return fmt.Sprintf("refundPeekOp{Of: %q, Via: %d}", o.Of, o.Via)
}

func (o refundPeekOp) run(h *harness) {
	rec := h.calls[o.Of]
	if rec == nil || h.hist.refunded[o.Of] || h.hist.settles[o.Of] != nil || rec.call.Tree != nil ||
		slices.ContainsFunc(h.limitsOf(rec.call), func(l slidelimit.Limit) bool { return l.InFlight }) {
		return
	}
	r := rec.res
	if !r.Allowed || r.Fallback || r.Shadow || r.Cached || len(r.Statuses) == 0 {
		return
	}
	// Its units are recorded when the first call with its id that reached
	// Redis was decided, which may be a call that fell back while its
	// command ran anyway (a stall past its timeout): a retry of it is then
	// answered as admitted, from that first call's admission.
	var admitted *record
	since := time.Time{}
	for _, x := range h.hist.records {
		if x.c.Req != o.Of {
			continue
		}
		if x.admitted() && (admitted == nil || x.a.Before(admitted.a)) {
			admitted = x
		}
		if since.IsZero() || x.a.Before(since) {
			since = x.a
		}
	}
	if admitted == nil {
		return
	}
	lim := h.lims[o.Via]
	limits := admitted.limits
	before, err1 := lim.PeekLimits(context.Background(), rec.call.Who, limits...)
	var err2 error
	if o.Outage {
		if err2 = h.outageRefund(o, lim, r); h.failure != "" {
			return
		}
	} else {
		err2 = lim.Refund(context.Background(), r)
	}
	after, err3 := lim.PeekLimits(context.Background(), rec.call.Who, limits...)
	end := time.Now()
	if err2 == nil {
		h.hist.refunded[o.Of] = true
	}
	if err1 != nil || err2 != nil || err3 != nil || before.Fallback || after.Fallback || len(before.Statuses) != len(limits) || len(after.Statuses) != len(limits) {
		return
	}
	cost := admitted.c.Cost
	for i, l := range limits {
		b, a := before.Statuses[i].Remaining, after.Statuses[i].Remaining
		step := l.Resolution().Microseconds()
		counts := inWindow(since.UnixMicro(), end.UnixMicro(), l.Window.Microseconds(), step)
		if step != 0 {
			// Within its horizon: its id is surely kept for the shorter of
			// its window and 15 minutes after its admission (on Redis's
			// clock, which may lag the host's by clockLag).
			counts = counts && end.Sub(since)+clockLag < micro(steppedIDHorizon(l.Window.Microseconds()))
		}
		// Remaining is the quota less the count only while it is above 0.
		if counts && b > 0 && b+cost <= l.Quota && a-b < cost {
			h.fail(kindRefund, "%s: refunding %s (cost %d, admitted %v ago) gave back %d units of %v (remaining %d before, %d after), want %d",
				o, o.Of, cost, end.Sub(since).Round(time.Millisecond), a-b, l, b, a, cost)
			return
		}
	}
}

// judgeCalls holds each call of a round to its own settings: no fallback
// unless the fault outlasted its limiter's timeout, the policy's decision
// when it falls back, and FailLocal deciding by the call's limits.
func (hi *history) judgeCalls(recs []*record) {
	h := hi.h
	for _, r := range recs {
		spec := h.specs[r.c.Lim]
		switch {
		case r.err == nil && !r.res.Fallback:
			continue
		case errors.Is(r.err, context.Canceled) || errors.Is(r.err, context.DeadlineExceeded) && !r.res.Fallback:
			continue // a Wait that left or could not be admitted in time
		case !isUnavailable(r.err) && !r.res.Fallback:
			h.fail(kindDecision, "%s: unexpected error %v", r.c, r.err)
			return
		}
		excused := r.stall > 0 && spec.Timeout < 2*r.stall+stallSlack || !spec.strict() ||
			r.b.Sub(r.healed) < healTime || h.env.healed.After(r.a) || h.env.mig.splitDuring(r.c.Who, r.a, r.b)
		if !excused {
			h.fail(kindFallback, "%s: limiter %d (timeout %v, %s) fell back (%v) after %v, Redis stalled %v",
				r.c, r.c.Lim, spec.Timeout, policyName(spec.Policy), r.err, r.b.Sub(r.a).Round(time.Millisecond), r.stall)
			return
		}
		if spec.Policy == slidelimit.FailLocal && !slices.Contains(r.limits, r.res.Limit) {
			h.fail(kindLocal, "%s: a FailLocal decision of limit %v, want one of the call's limits %v", r.c, r.res.Limit, r.limits)
			return
		}
	}
}

// judgeHistory checks the whole history: no limit admits more than its
// quota in any window, counting only admissions that surely fall in it,
// and a retried id is answered admitted while it still counts.
func (hi *history) judgeHistory() {
	h := hi.h
	// One admission per logical request: its first admitted attempt.
	first := map[string]*record{}
	var adm []*record
	for _, r := range hi.records {
		if !r.admitted() || hi.refunded[r.c.Req] {
			continue
		}
		if f := first[r.c.Req]; f == nil || r.b.Before(f.b) {
			first[r.c.Req] = r
		}
	}
	since := map[string]time.Time{} // when each admission may date from
	for req, r := range first {
		// An earlier attempt of the same id (one that timed out, say) may
		// be the one Redis recorded: the admission may date from it.
		x := *r
		x.units = hi.leastUnits(r)
		for _, o := range hi.records {
			if o.c.Req == req && o.c.ID && o.a.Before(x.a) {
				x.a = o.a
			}
		}
		since[req] = x.a
		adm = append(adm, &x)
	}
	slices.SortFunc(adm, func(x, y *record) int { return x.a.Compare(y.a) })
	for _, log := range logsOf(adm) {
		if why := quotaViolation(log.adm); why != "" {
			h.fail(kindQuota, "%q: %s", log.who, why)
			return
		}
	}
	if why := hi.inFlightViolation(first); why != "" {
		h.fail(kindQuota, "%s", why)
		return
	}
	// Retries: an attempt begun after an admitted attempt of the same id
	// ended, while the request still counts in every window of its call,
	// must be admitted.
	for _, r := range hi.records {
		f := first[r.c.Req]
		if f == nil || r == f || !r.c.ID || r.c.Peek || r.c.Wait || !r.a.After(f.b) || r.err != nil || r.res.Fallback || r.res.Cached ||
			r.c.Tree != nil || hi.settles[r.c.Req] != nil {
			continue
		}
		w := slidelimit.MaxWindow
		for _, l := range r.limits {
			if !l.InFlight {
				w = min(w, l.Window)
			}
		}
		// The id is surely kept by the exact log while fewer units than its
		// largest exact quota came after it, and by a stepped log for its
		// horizon after its admission.
		kind, q, stepped := kindRetryStepped, 0, slidelimit.MaxWindow
		for _, l := range r.limits {
			if l.InFlight {
				continue
			}
			if l.Resolution() == 0 {
				kind, q = kindRetryExact, max(q, l.Quota)
			} else {
				stepped = min(stepped, micro(steppedIDHorizon(l.Window.Microseconds())))
			}
		}
		kept := q > 0 && exactIDKept(f.c.Cost, q, hi.unitsAfter(f)) ||
			stepped < slidelimit.MaxWindow && r.b.Sub(f.a)+clockLag < stepped
		if !kept {
			continue
		}
		if r.b.Before(since[r.c.Req].Add(w)) && !r.res.Allowed {
			h.fail(kind, "%s: a retry %v after its id was admitted (%s) was denied: %s",
				r.c, r.a.Sub(f.b).Round(time.Millisecond), f.c, resultString(r.res))
			return
		}
	}
}

// unitsAfter counts the units of the admissions that may have come after
// f's into its identity's exact log, or at its time.
func (hi *history) unitsAfter(f *record) int {
	n := 0
	for _, x := range hi.records {
		if x != f && x.admitted() && x.c.Who == f.c.Who && !x.b.Before(f.a) &&
			slices.ContainsFunc(x.limits, func(l slidelimit.Limit) bool { return l.Resolution() == 0 }) {
			n += x.c.Cost
		}
	}
	return n
}

// admittedAfter counts the admissions that may have come after f's.
func (hi *history) admittedAfter(f *record) int {
	n := 0
	for _, x := range hi.records {
		if x != f && x.admitted() && x.c.Who == f.c.Who && !x.b.Before(f.a) {
			n++
		}
	}
	return n
}

// quotaViolation finds a set of admissions of one identity that surely lie
// in one window of a limit some of them were admitted under, and that hold
// more than its quota: the last of them to be decided saw the others, and
// admitted beyond the quota. Only admissions whose own call counted that
// far back are counted (narrowing_test.go's retention).
func quotaViolation(adm []*record) string {
	var limits []slidelimit.Limit
	for _, r := range adm {
		for _, l := range r.limits {
			if !slices.Contains(limits, l) {
				limits = append(limits, l)
			}
		}
	}
	for _, l := range limits {
		w := l.Window.Microseconds()
		step := l.Resolution().Microseconds()
		// counts reports whether an admission is counted in l's log and
		// kept as long as l's window: its call had a limit of l's
		// resolution and a window at least l's.
		counts := func(r *record) bool {
			return slices.ContainsFunc(r.limits, func(x slidelimit.Limit) bool {
				return x.Resolution() == l.Resolution() && x.Window >= l.Window
			})
		}
		for i, r := range adm {
			if !slices.Contains(r.limits, l) {
				continue
			}
			lo := r.a.UnixMicro()
			units, maxHi := 0, int64(0)
			var members []string
			member := func(x *record) string {
				return fmt.Sprintf("%s(%d units, %s, +%v..+%v)", x.c.Req, x.units, planString(x.limits),
					x.a.Sub(r.a).Round(10*time.Microsecond), x.b.Sub(r.a).Round(10*time.Microsecond))
			}
			for _, x := range adm[i:] {
				xh := x.b.UnixMicro()
				if !counts(x) || !sureWithin(lo, xh, w, step) {
					continue
				}
				if slices.Contains(x.limits, l) || x == r {
					units += x.units
					maxHi = max(maxHi, xh)
					members = append(members, member(x))
				}
			}
			if maxHi == 0 {
				continue // the anchor's own call outlasted the window
			}
			// Admissions surely before the anchor, surely still in the
			// window of the last one decided.
			for _, x := range adm[:i] {
				if counts(x) && x.b.UnixMicro() < lo && sureWithin(x.a.UnixMicro(), maxHi, w, step) {
					units += x.units
					members = append(members, member(x))
				}
			}
			if units > l.Quota {
				return fmt.Sprintf("%v admitted %d units within one window (requests %v)", l, units, members)
			}
		}
	}
	return ""
}

// sureWithin reports whether a unit admitted no sooner than lo surely
// counts at a decision made no later than hi, in a window of w µs at step
// (0: exact).
func sureWithin(lo, hi, w, step int64) bool {
	if step == 0 {
		return lo > hi-w
	}
	return floorDiv(lo, step) >= floorDiv(hi-w, step)
}

// concurrentCheck is one check of a concurrent mode.
func concurrentCheck(t *rapid.T, e *env) {
	specs := genShortSpecs(t)
	h := start(t, e, specs)
	h.hist = newHistory(h)
	t.Repeat(map[string]func(*rapid.T){
		"round":  func(t *rapid.T) { h.do(genRound(t, h)) },
		"sleep":  func(t *rapid.T) { h.do(genSleep(t)) },
		"refund": func(t *rapid.T) { h.do(genRefundPeek(t, h)) },
		"settle": func(t *rapid.T) { h.do(genSettleRound(t, h)) },
		"":       func(*rapid.T) { h.verify() },
	})
	h.finish()
}

func genShortSpecs(t *rapid.T) []limiterSpec {
	n := rapid.IntRange(2, 4).Draw(t, "limiters")
	specs := make([]limiterSpec, n)
	for i := range specs {
		s := limiterSpec{
			Process: rapid.IntRange(0, processes-1).Draw(t, "process"),
			Limits:  []slidelimit.Limit{rapid.SampledFrom(shortCatalogue).Draw(t, "own limit")},
			Timeout: rapid.SampledFrom([]time.Duration{10 * time.Second, 2 * time.Second, 20 * time.Millisecond, 100 * time.Millisecond}).Draw(t, "timeout"),
			Policy:  rapid.SampledFrom([]slidelimit.FailurePolicy{slidelimit.FailOpen, slidelimit.FailClosed, slidelimit.FailLocal}).Draw(t, "policy"),
		}
		if s.Policy == slidelimit.FailLocal {
			s.Replicas = rapid.IntRange(1, 2).Draw(t, "replicas")
		}
		s.DenyCache = rapid.Bool().Draw(t, "deny cache")
		specs[i] = s
	}
	return specs
}

func genRound(t *rapid.T, h *harness) roundOp {
	n := rapid.IntRange(1, 200).Draw(t, "calls")
	o := roundOp{}
	if h.env.private {
		switch rapid.IntRange(0, 5).Draw(t, "fault") {
		case 3:
			o.Pause = rapid.SampledFrom([]time.Duration{300 * time.Millisecond, 1500 * time.Millisecond}).Draw(t, "pause")
		case 4:
			o.Kill = rapid.SampledFrom([]time.Duration{time.Millisecond, 5 * time.Millisecond}).Draw(t, "kill after")
		case 5:
			if h.env.cluster {
				o.Migrate = rapid.SampledFrom(identities[:2]).Draw(t, "migrate")
			}
		}
	}
	req := h.nextReq()
	for i := range n {
		c := cCall{allowOp: allowOp{Lim: rapid.IntRange(0, len(h.lims)-1).Draw(t, "limiter"),
			Who: rapid.SampledFrom(identities[:2]).Draw(t, "identity"), Cost: 1, Req: fmt.Sprintf("%s.%d", req, i)}}
		switch rapid.IntRange(0, 11).Draw(t, "kind") {
		case 0, 1:
			c.Plan = genShortPlan(t)
		case 2:
			c.Wait = true
			c.Cancel = rapid.SampledFrom([]time.Duration{0, 20 * time.Millisecond, 200 * time.Millisecond}).Draw(t, "cancel")
		case 3:
			// A retry of a call whose id may count again: not of a tree, a
			// place in flight, or a request settled since.
			if of, ok := pickHandle(t, h, "retry of"); ok {
				if rec := h.calls[of]; rec.call.Tree == nil && h.hist.settles[of] == nil &&
					!slices.ContainsFunc(h.limitsOf(rec.call), func(l slidelimit.Limit) bool { return l.InFlight }) {
					c.allowOp = rec.call
				}
			}
		case 4:
			c.Tree = genShortTree(t)
		}
		if c.Req == fmt.Sprintf("%s.%d", req, i) {
			c.ID = rapid.Bool().Draw(t, "request id")
			if rapid.IntRange(0, 4).Draw(t, "heavy") == 4 {
				c.Cost = rapid.IntRange(1, min(minQuota(h.limitsOf(c.allowOp), levelsOf(c.allowOp)...), 20)).Draw(t, "cost")
			}
		}
		o.Calls = append(o.Calls, c)
	}
	return o
}

func genSleep(t *rapid.T) sleepOp {
	return sleepOp{D: rapid.SampledFrom([]time.Duration{50 * time.Millisecond, 250 * time.Millisecond, 700 * time.Millisecond}).Draw(t, "sleep")}
}

func genRefundPeek(t *rapid.T, h *harness) op {
	of, ok := pickHandle(t, h, "refund of")
	if !ok {
		return genSleep(t)
	}
	return refundPeekOp{Of: of, Via: rapid.IntRange(0, len(h.lims)-1).Draw(t, "refund via"), Outage: rapid.IntRange(0, 2).Draw(t, "refund across an outage") == 2}
}
