package model

import (
	"fmt"
	"slices"
	"time"

	slidelimit "github.com/slidelimit/slidelimit/core"
	"pgregory.net/rapid"
)

// The generators. Small draws shrink first, so the simplest choice comes
// first in every list.

// limitCatalogue is what limits and plans are made of in the sequential
// modes, where the test clock can jump: exact limits from a millisecond
// window to a day, and stepped ones, by quota above MaxExactQuota or by an
// explicit Step, at several steps.
var limitCatalogue = []slidelimit.Limit{
	slidelimit.Per(3, time.Second),
	slidelimit.Per(5, 10*time.Second),
	slidelimit.Per(1, time.Second),
	slidelimit.Per(20, time.Minute),
	slidelimit.Per(100_000, 24*time.Hour),                 // stepped by default: 1-minute steps
	slidelimit.Per(200, time.Minute).Stepped(time.Second), // stepped explicitly
	slidelimit.Per(1000, time.Second),
	slidelimit.Per(1000, 24*time.Hour),
	slidelimit.Per(100, 10*time.Millisecond),
	slidelimit.Per(10, time.Minute),
	slidelimit.Per(100, time.Hour),
	slidelimit.Per(5, 10*time.Second).Stepped(time.Second),
	slidelimit.Per(2000, time.Minute), // stepped by default: 41.666 ms steps
	slidelimit.Per(60, time.Minute).Stepped(time.Second),
	slidelimit.Per(300, time.Hour).Stepped(time.Minute),
	slidelimit.Per(600, time.Minute),
	slidelimit.Per(5_000_000_000, 24*time.Hour),    // a budget of billions: 1-minute steps, counts past 32 bits
	slidelimit.Per(slidelimit.MaxQuota, time.Hour), // the largest quota: 2.5 s steps
}

// inFlightCatalogue is what in-flight limits of per-call plans are made of.
var inFlightCatalogue = []slidelimit.Limit{
	slidelimit.InFlight(2, time.Second),
	slidelimit.InFlight(1, 10*time.Second),
	slidelimit.InFlight(3, time.Minute),
}

// genPlan draws 1 to 3 distinct limits.
func genPlan(t *rapid.T, label string) plan {
	n := rapid.IntRange(1, 3).Draw(t, label+" size")
	var p plan
	for range n {
		l := rapid.SampledFrom(limitCatalogue).Draw(t, label)
		dup := false
		for _, x := range p {
			dup = dup || x.String() == l.String()
		}
		if !dup {
			p = append(p, l)
		}
	}
	return p
}

// genCallPlan draws a per-call plan: genPlan's limits, some of them
// counting requests or shadows, and perhaps a limit in flight.
func genCallPlan(t *rapid.T, label string) plan {
	p := genPlan(t, label)
	for i := range p {
		switch rapid.IntRange(0, 9).Draw(t, label+" kind") {
		case 8:
			p[i] = p[i].ForRequests()
		case 9:
			p[i] = p[i].Shadowed()
		}
	}
	if rapid.IntRange(0, 3).Draw(t, label+" in flight") == 3 {
		l := rapid.SampledFrom(inFlightCatalogue).Draw(t, label+" lease")
		if rapid.IntRange(0, 4).Draw(t, label+" in-flight shadow") == 4 {
			l = l.Shadowed()
		}
		p = append(p, l)
		// A second, of its own lease: shadowed half the time, so that a
		// shadow's lease meets an enforced one's ("Shadow never decides").
		if rapid.IntRange(0, 3).Draw(t, label+" second in flight") == 3 {
			m := rapid.SampledFrom(inFlightCatalogue).Draw(t, label+" second lease")
			if rapid.IntRange(0, 1).Draw(t, label+" second in-flight shadow") == 1 {
				m = m.Shadowed()
			}
			p = append(p, m.Named("second-in-flight")) // a name of its own: two limits may not share one
		}
	}
	return p
}

// minQuota is the largest cost the generator gives a call under limits
// (of a tree of levels, levels[i] the level of limits[i]; nil: one
// identity): maxCost's, with the quotas of shadow limits too, for
// exact.lua's RetryAfter of a limit whose quota is below the cost reads
// the log from the wrong end.
func minQuota(limits plan, levels ...string) int { return costCap(limits, levels, true) }

// maxCost is the largest cost the library takes for a call under limits
// (levels as minQuota's): the smallest quota of an enforced limit of
// units, whatever the kind of its log. Above it a call is ErrInvalidCost.
func maxCost(limits plan, levels []string) int { return costCap(limits, levels, false) }

// costCap is maxCost, and with shadows minQuota.
func costCap(limits plan, levels []string, shadows bool) int {
	q := slidelimit.MaxQuota
	for _, l := range limits {
		if !l.InFlight && !l.Requests && (shadows || !l.Shadow) {
			q = min(q, l.Quota)
		}
	}
	return q
}

// genSpecs draws the limiters of a check: two to four, spread over the
// mode's processes, with their own limits, timeouts and policies.
func genSpecs(t *rapid.T) []limiterSpec {
	n := rapid.IntRange(2, 4).Draw(t, "limiters")
	specs := make([]limiterSpec, n)
	for i := range specs {
		s := limiterSpec{
			Process: rapid.IntRange(0, processes-1).Draw(t, "process"),
			Limits:  genPlan(t, "own limit"),
			Timeout: rapid.SampledFrom([]time.Duration{10 * time.Second, 2 * time.Second, 100 * time.Millisecond, 20 * time.Millisecond}).Draw(t, "timeout"),
			Policy:  rapid.SampledFrom([]slidelimit.FailurePolicy{slidelimit.FailOpen, slidelimit.FailClosed, slidelimit.FailLocal}).Draw(t, "policy"),
		}
		if s.Policy == slidelimit.FailLocal {
			s.Replicas = rapid.IntRange(1, 3).Draw(t, "replicas")
		}
		s.DenyCache = rapid.Bool().Draw(t, "deny cache")
		s.Shadow = rapid.IntRange(0, 9).Draw(t, "shadow") == 9
		specs[i] = s
	}
	return specs
}

// identities are the identities a sequence uses; a stalled group takes one
// each, so there are as many as its largest group.
var identities = []string{"a", "b", "c", "d", "e"}

// opKind is one kind of step, with its weight.
type opKind struct {
	name   string
	weight int
	gen    func(t *rapid.T, h *harness) op
}

// opKinds lists the steps of the sequential modes.
func opKinds(e *env) []opKind {
	kinds := []opKind{
		{"allow", 30, genAllow},
		{"advance", 12, genAdvance},
		{"retry", 8, genRetry},
		{"refund", 7, genRefund},
		{"peek", 5, genPeek},
		{"burst", 5, genBurst},
		{"wait", 4, genWait},
		{"reset", 2, genReset},
		{"block", 1, genBlock},
		{"blocked", 1, genBlocked},
		{"wait race", 3, genWaitRace},
		{"stall", 3, genStall},
		{"settle", 6, genSettle},
		{"shift", 4, genShift},
		{"tree", 5, genTree},
		{"edge", 6, genEdge},
		{"knock", 4, genKnock},
		{"horizon", 3, genHorizon},
		{"holds", 3, genHolds},
	}
	if e.private {
		kinds = append(kinds, opKind{"kill", 1, func(*rapid.T, *harness) op { return killOp{} }},
			opKind{"lost reply", 5, genLostReply})
	}
	// A partition of every process from a Redis that keeps its data: the
	// settlements made during it are kept, and land when it heals.
	kinds = append(kinds, opKind{"cut", 2, func(*rapid.T, *harness) op { return cutOp{} }},
		opKind{"heal", 3, func(*rapid.T, *harness) op { return healOp{} }},
		opKind{"outage", 4, genOutage})
	if e.server != nil {
		kinds = append(kinds, opKind{"down", 2, func(*rapid.T, *harness) op { return downOp{} }},
			opKind{"up", 3, func(*rapid.T, *harness) op { return upOp{} }})
	}
	if e.cluster && e.private {
		kinds = append(kinds, opKind{"migrate", 3, genMigrate})
	}
	return kinds
}

// genOp draws one step.
func genOp(t *rapid.T, h *harness, kinds []opKind) op {
	total := 0
	for _, k := range kinds {
		total += k.weight
	}
	// Half the time rapid's own draw, which favours the first kinds
	// (allow, advance, retry, refund, peek, burst: what long sequences of
	// one identity are made of); half the time an even one, which reaches
	// the rest as often as their weights say.
	var n int
	if uniform(t, 2, "op draw") == 0 {
		n = rapid.IntRange(0, total-1).Draw(t, "op")
	} else {
		n = uniform(t, total, "op")
	}
	for _, k := range kinds {
		if n < k.weight {
			return k.gen(t, h)
		}
		n -= k.weight
	}
	panic("not reached")
}

// uniform draws 0 to n-1 about evenly. rapid biases every draw towards
// small values, so that it shrinks well: IntRange(0, 119) falls in its
// first quarter 59% of the time, which made the first kind of step (allow)
// two thirds of all steps and left the rare ones (settles, edges, faults)
// far rarer than their weights. Three draws xored fall there 28% of the
// time, and still shrink towards 0.
func uniform(t *rapid.T, n int, label string) int {
	x := rapid.Uint64().Draw(t, label) ^ rapid.Uint64().Draw(t, label) ^ rapid.Uint64().Draw(t, label)
	return int(x % uint64(n))
}

func (h *harness) nextReq() string { return fmt.Sprintf("r%d", len(h.ops)+1) }

// genCall draws one call: a limiter, an identity, a cost, its own limits
// or a plan of its own, and a request id or none.
func genCall(t *rapid.T, h *harness, who string) allowOp {
	c := allowOp{Lim: rapid.IntRange(0, len(h.lims)-1).Draw(t, "limiter"), Who: who, Req: h.nextReq()}
	if who == "" {
		c.Who = rapid.SampledFrom(identities[:3]).Draw(t, "identity")
	}
	if rapid.IntRange(0, 2).Draw(t, "per-call limits") == 2 {
		c.Plan = genCallPlan(t, "plan")
	}
	c.Cost = genCost(t, minQuota(h.limitsOf(c)))
	if most := maxCost(h.limitsOf(c), nil); most < slidelimit.MaxQuota && rapid.IntRange(0, 15).Draw(t, "cost over") == 15 {
		c.Cost = most + 1 // just over: ErrInvalidCost
	}
	// Half the calls carry an id: a call with one never meets the deny
	// cache, which only calls without one ask.
	c.ID = rapid.Bool().Draw(t, "request id")
	return c
}

// genCost draws a cost from its classes: 1, small, the whole quota, or
// any in between.
func genCost(t *rapid.T, quota int) int {
	switch rapid.IntRange(0, 5).Draw(t, "cost class") {
	case 3:
		return rapid.IntRange(1, min(quota, 5)).Draw(t, "small cost")
	case 4:
		return quota
	case 5:
		return rapid.IntRange(1, quota).Draw(t, "cost")
	}
	return 1
}

func genAllow(t *rapid.T, h *harness) op { return genCall(t, h, "") }

func genPeek(t *rapid.T, h *harness) op {
	c := genCall(t, h, "")
	c.Peek, c.Cost, c.ID = true, 0, false
	return c
}

func genAdvance(t *rapid.T, _ *harness) op {
	return advanceOp{D: rapid.SampledFrom([]time.Duration{time.Second, time.Millisecond, 10 * time.Millisecond, 100 * time.Millisecond,
		500 * time.Millisecond, 10 * time.Second, time.Minute, time.Hour, 24 * time.Hour, 41666 * time.Microsecond}).Draw(t, "advance")}
}

// pickHandle draws a handle of a past call with a request id, the newest
// first.
func pickHandle(t *rapid.T, h *harness, label string) (string, bool) {
	if len(h.order) == 0 {
		return "", false
	}
	i := rapid.IntRange(0, len(h.order)-1).Draw(t, label)
	return h.order[len(h.order)-1-i], true
}

// pickNear draws a handle of a past call with a request id that was
// admitted, the k-th newest of its identity's, with k around a documented
// horizon: the newest few, and the quota of an exact limit used on it.
// Half the time it is pickHandle's draw. (A stepped log's horizon is one
// of time: genHorizon probes it.)
func pickNear(t *rapid.T, h *harness, label string) (string, bool) {
	if uniform(t, 2, label+" near a horizon") == 1 {
		who := rapid.SampledFrom(identities[:3]).Draw(t, label+" identity")
		var mine []string // newest first
		for i := len(h.order) - 1; i >= 0; i-- {
			if rec := h.calls[h.order[i]]; rec != nil && rec.call.Who == who && rec.res.Allowed && !rec.res.Fallback && !rec.res.Shadow {
				mine = append(mine, h.order[i])
			}
		}
		ks := []int{0, 1, 2, 8, 63, 64, 65}
		if im := h.ids[who]; im != nil && im.maxExact > 0 {
			ks = append(ks, im.maxExact-1, im.maxExact, im.maxExact+1)
		}
		ks = slices.DeleteFunc(ks, func(k int) bool { return k < 0 || k >= len(mine) })
		if len(ks) > 0 {
			return mine[rapid.SampledFrom(ks).Draw(t, label+" k-th newest")], true
		}
	}
	return pickHandle(t, h, label)
}

func genRetry(t *rapid.T, h *harness) op {
	req, ok := pickNear(t, h, "retry of")
	if !ok {
		return genAllow(t, h)
	}
	return retryOp{Of: req}
}

func genRefund(t *rapid.T, h *harness) op {
	req, ok := pickNear(t, h, "refund of")
	if !ok {
		return genAllow(t, h)
	}
	return refundOp{Of: req, Via: rapid.IntRange(0, len(h.lims)-1).Draw(t, "refund via")}
}

func genBurst(t *rapid.T, h *harness) op {
	c := genCall(t, h, "")
	n := rapid.IntRange(1, 20).Draw(t, "burst")
	if uniform(t, 2, "long burst") == 1 {
		n = rapid.IntRange(steppedSweep+1, 2*steppedSweep+40).Draw(t, "burst")
	}
	return burstOp{Lim: c.Lim, Who: c.Who, Cost: c.Cost, Plan: c.Plan, N: n, Req: c.Req, ID: c.ID}
}

func genWait(t *rapid.T, h *harness) op {
	c := genCall(t, h, "")
	return waitOp{Lim: c.Lim, Who: c.Who, Cost: genCost(t, minQuota(h.specs[c.Lim].Limits)), Req: c.Req, ID: c.ID,
		D: rapid.SampledFrom([]time.Duration{50 * time.Millisecond, 300 * time.Millisecond}).Draw(t, "deadline")}
}

func genReset(t *rapid.T, h *harness) op {
	return resetOp{Lim: rapid.IntRange(0, len(h.lims)-1).Draw(t, "limiter"), Who: rapid.SampledFrom(identities[:3]).Draw(t, "identity")}
}

func genBlock(t *rapid.T, h *harness) op {
	return blockOp{Lim: rapid.IntRange(0, len(h.lims)-1).Draw(t, "limiter"), Who: rapid.SampledFrom(identities[:3]).Draw(t, "identity"),
		D: rapid.SampledFrom([]time.Duration{100 * time.Millisecond, time.Second}).Draw(t, "block")}
}

func genBlocked(t *rapid.T, h *harness) op {
	return blockedOp{Lim: rapid.IntRange(0, len(h.lims)-1).Draw(t, "limiter"), Who: rapid.SampledFrom(identities[:3]).Draw(t, "identity")}
}

func genWaitRace(t *rapid.T, h *harness) op {
	lim := rapid.IntRange(0, len(h.lims)-1).Draw(t, "limiter")
	return waitRaceOp{Lim: lim, Who: rapid.SampledFrom(identities[:3]).Draw(t, "identity"),
		Cost: genCost(t, minQuota(h.specs[lim].Limits)), Req: h.nextReq(), ID: rapid.Bool().Draw(t, "head id"),
		Cancel: rapid.SampledFrom([]time.Duration{30 * time.Millisecond, 300 * time.Millisecond}).Draw(t, "cancel"),
		Others: rapid.IntRange(0, 2).Draw(t, "others"),
		Pause:  rapid.SampledFrom([]time.Duration{0, 200 * time.Millisecond}).Draw(t, "pause")}
}

func genStall(t *rapid.T, h *harness) op {
	n := rapid.IntRange(1, len(identities)).Draw(t, "stalled calls")
	o := stallOp{Pause: rapid.SampledFrom([]time.Duration{50 * time.Millisecond, 300 * time.Millisecond, 1500 * time.Millisecond}).Draw(t, "pause")}
	for i := range n {
		c := genCall(t, h, identities[i])
		c.Req = fmt.Sprintf("%s.%d", h.nextReq(), i)
		o.Calls = append(o.Calls, c)
	}
	return o
}

func genMigrate(t *rapid.T, _ *harness) op {
	return migrateOp{Who: rapid.SampledFrom(identities[:3]).Draw(t, "identity"), StringsFirst: rapid.Bool().Draw(t, "strings first"),
		Pause: rapid.SampledFrom([]time.Duration{20 * time.Millisecond, 50 * time.Millisecond}).Draw(t, "migration pause")}
}

// genSettle draws a correction of a past call with a request id: Settle
// (to fewer or more units, or none; once or twice), Release, Renew or
// Refund.
func genSettle(t *rapid.T, h *harness) op {
	req, ok := pickNear(t, h, "settle of")
	if !ok {
		return genAllow(t, h)
	}
	// Often, a request a settle left unsure (its reply lost): the next
	// settle must land on its own cost from either outcome.
	var unsure []string
	for _, r := range h.order {
		if rec := h.calls[r]; rec != nil && rec.unsure {
			unsure = append(unsure, r)
		}
	}
	if len(unsure) > 0 && uniform(t, 2, "settle an unsure one") == 1 {
		// A settle to any cost from none to past the higher of the two
		// it may hold: one between them shows which it held.
		rec := h.calls[rapid.SampledFrom(unsure).Draw(t, "unsure")]
		return settleOp{Of: rec.call.Req, Via: rapid.IntRange(0, len(h.lims)-1).Draw(t, "settle via"), Kind: "settle",
			Cost: uniform(t, rec.hi+3, "settle an unsure one to")}
	}
	o := settleOp{Of: req, Via: rapid.IntRange(0, len(h.lims)-1).Draw(t, "settle via"),
		Kind: rapid.SampledFrom([]string{"settle", "release", "renew", "refund"}).Draw(t, "settle kind")}
	if o.Kind == "settle" {
		cost := h.calls[req].cost()
		most := 2*cost + 2
		// The targets from their classes: none, fewer, as many, more.
		switch rapid.IntRange(0, 3).Draw(t, "settle to") {
		case 0:
			o.Cost = 0
		case 1:
			o.Cost = rapid.IntRange(0, max(0, cost-1)).Draw(t, "fewer")
		case 2:
			o.Cost = cost
		case 3:
			o.Cost = rapid.IntRange(min(cost+1, most), most).Draw(t, "more")
		}
		o.Twice = rapid.Bool().Draw(t, "settle twice")
	}
	if h.env.private && uniform(t, 4, "settle under a pause") == 3 {
		o.Pause = lostReplyPause // a short timeout's reply is lost: the script runs after it gave up
		var short []int
		for i, s := range h.specs {
			if s.Timeout < o.Pause {
				short = append(short, i)
			}
		}
		if len(short) > 0 && rapid.IntRange(0, 3).Draw(t, "settle via a short timeout") > 0 {
			o.Via = rapid.SampledFrom(short).Draw(t, "settle via, short")
		}
	}
	return o
}

// genShift draws a Shift of a past call with a request id: by less than a
// step of the stepped limits drawn, by one or several, or past now and
// past a window of a second.
func genShift(t *rapid.T, h *harness) op {
	req, ok := pickHandle(t, h, "shift of")
	if !ok {
		return genAllow(t, h)
	}
	// Half the time, of a recent call that a stepped limit counted, which
	// moves by whole steps: rarer among the calls than exact ones.
	var stepped []string
	for i := len(h.order) - 1; i >= 0 && len(h.order)-i <= 32; i-- {
		if rec := h.calls[h.order[i]]; rec != nil && slices.ContainsFunc(h.limitsOf(rec.call), func(l slidelimit.Limit) bool { return l.Resolution() > 0 && !l.InFlight }) {
			stepped = append(stepped, h.order[i])
		}
	}
	if len(stepped) > 0 && rapid.Bool().Draw(t, "shift a stepped call") {
		req = rapid.SampledFrom(stepped).Draw(t, "shift of stepped")
	}
	return settleOp{Of: req, Via: rapid.IntRange(0, len(h.lims)-1).Draw(t, "shift via"), Kind: "shift",
		D: rapid.SampledFrom([]time.Duration{time.Millisecond, 30 * time.Millisecond, 100 * time.Millisecond, 2 * time.Second}).Draw(t, "shift by")}
}

// treeLevels are the levels of a tenant's tree below the tenant itself.
var treeLevels = []string{"team", "key"}

// genTree draws an AllowTree call: the tenant itself and one or two
// levels below it, each with a plan of its own; limits named apart, as
// the tree needs.
func genTree(t *rapid.T, h *harness) op {
	c := genCall(t, h, "")
	c.Plan = nil
	n := rapid.IntRange(1, len(treeLevels)).Draw(t, "levels")
	var limits plan
	var levels []string
	for i := range n + 1 {
		lv := slidelimit.Level{}
		if i > 0 {
			lv.Identity = treeLevels[i-1]
		}
		if i == 0 && rapid.Bool().Draw(t, "tenant level") {
			continue
		}
		for j, l := range genCallPlan(t, "level plan") {
			lv.Limits = append(lv.Limits, l.Named(fmt.Sprintf("l%d.%d", i, j)))
			levels = append(levels, lv.Identity)
		}
		limits = append(limits, lv.Limits...)
		c.Tree = append(c.Tree, lv)
	}
	c.Cost = genCost(t, minQuota(limits, levels...))
	return c
}

// recent returns the handles of the newest calls (at most n) that keep
// for which ok holds, newest first.
func (h *harness) recent(n int, ok func(*callRec) bool) []string {
	var out []string
	for i := len(h.ops) - 1; i >= 0 && len(out) < n; i-- {
		var reqs []string
		switch o := h.ops[i].(type) {
		case allowOp:
			reqs = []string{o.Req}
		case burstOp:
			reqs = []string{fmt.Sprintf("%s.%d", o.Req, o.N-1), fmt.Sprintf("%s.0", o.Req)}
		case knockOp:
			reqs = []string{fmt.Sprintf("r%d.knock", i+2)}
		}
		for _, r := range reqs {
			if rec := h.calls[r]; rec != nil && rec.now != 0 && ok(rec) && !slices.Contains(out, r) {
				out = append(out, r)
			}
		}
	}
	return out
}

// genEdge draws a move of the clock to an edge of a recent call, ±1 µs or
// on it: the end of a limit's window counted from its admission, of its
// lease in flight, or of a denial's RetryAfter.
func genEdge(t *rapid.T, h *harness) op {
	recs := h.recent(8, func(*callRec) bool { return true })
	if len(recs) == 0 {
		return genAdvance(t, h)
	}
	o := edgeOp{Of: rapid.SampledFrom(recs).Draw(t, "edge of"), Delta: rapid.SampledFrom([]int64{0, -1, 1}).Draw(t, "edge delta")}
	rec := h.calls[o.Of]
	limits := h.limitsOf(rec.call)
	switch {
	case !rec.res.Allowed && rec.res.RetryAfter > 0 && rapid.Bool().Draw(t, "edge of its RetryAfter"):
		o.What = "retry"
	default:
		o.What, o.Limit = "window", rapid.IntRange(0, len(limits)-1).Draw(t, "edge limit")
		if limits[o.Limit].InFlight {
			o.What = "lease"
		}
	}
	return o
}

// genKnock draws a knock: the call of a recent denial again, without an
// id, often on an edge of its RetryAfter first.
func genKnock(t *rapid.T, h *harness) op {
	recs := h.recent(8, func(r *callRec) bool { return !r.res.Allowed && !r.call.Peek })
	if len(recs) == 0 {
		return genAllow(t, h)
	}
	o := knockOp{Of: rapid.SampledFrom(recs).Draw(t, "knock of")}
	if h.calls[o.Of].res.RetryAfter > 0 && rapid.IntRange(0, 3).Draw(t, "knock at its RetryAfter") > 0 {
		o.AtRetry, o.Delta = true, rapid.SampledFrom([]int64{0, -1, 1}).Draw(t, "knock delta")
	}
	return o
}

// genLostReply draws a settle whose reply is lost, then another settle of
// the same request: the first through a limiter whose timeout is shorter
// than the CLIENT PAUSE it is sent under, so that its script runs after
// the limiter gave up; the second through one that waits for Redis, so
// that the Peek after it is judged.
func genLostReply(t *rapid.T, h *harness) op {
	var short, strict []int
	for i, s := range h.specs {
		if s.Timeout < lostReplyPause {
			short = append(short, i)
		}
		if s.strict() {
			strict = append(strict, i)
		}
	}
	// A recent request Redis admitted with an id, into an exact log of
	// units, which counts what the client says it holds, under a window
	// long enough to still count it when the pause has passed.
	recs := h.recent(16, func(r *callRec) bool {
		res := r.res
		return r.call.ID && res.Allowed && !res.Fallback && !res.Shadow && !res.Cached && r.cost() > 0 && !r.unsure &&
			slices.ContainsFunc(h.limitsOf(r.call), func(l slidelimit.Limit) bool {
				return l.Resolution() == 0 && !l.InFlight && !l.Requests && l.Window >= 10*time.Second
			})
	})
	if !h.reach() || len(recs) == 0 || len(short) == 0 || len(strict) == 0 {
		return genSettle(t, h)
	}
	req := rapid.SampledFrom(recs).Draw(t, "lost reply of")
	// Targets that tell the outcomes apart: the lost one other than the
	// cost, the next other than the lost one.
	cost := h.calls[req].cost()
	most := 2*cost + 2
	to := (cost + 1 + uniform(t, most, "lost to")) % (most + 1)
	then := (to + 1 + uniform(t, most, "then to")) % (most + 1)
	return lostReplyOp{Of: req, Via: rapid.SampledFrom(short).Draw(t, "lost via"), To: to,
		ThenVia: rapid.SampledFrom(strict).Draw(t, "then via"), Then: then}
}

// horizonCatalogue is what a probe of the stepped ids' horizon decides
// under: stepped limits whose quotas take more admissions than the horizon.
var horizonCatalogue = []slidelimit.Limit{
	slidelimit.Per(200, time.Minute).Stepped(time.Second),
	slidelimit.Per(100_000, 24*time.Hour),
	slidelimit.Per(2000, time.Minute),
	slidelimit.Per(300, time.Hour).Stepped(time.Minute),
}

// genHorizon draws a probe of the stepped ids' horizon: two bursts of
// admissions with ids, a gap apart, then, around the horizon later, an
// admission that sweeps the ids due, then a retry, refund or settle of the
// k-th newest of the bursts'.
func genHorizon(t *rapid.T, h *harness) op {
	c := genCall(t, h, "")
	l := rapid.SampledFrom(horizonCatalogue).Draw(t, "horizon limit")
	hz := micro(steppedIDHorizon(l.Window.Microseconds()))
	step := l.Resolution()
	// The first of each list is what rapid draws most: past the horizon
	// and its sixteenth, when a sweep is surely due, and a settle
	// (ErrPastHorizon).
	after := []time.Duration{hz + hz/16 + step, hz - step, hz, hz + hz/16, 2 * hz}[uniform(t, 5, "after")]
	n := 1 + uniform(t, 3*steppedSweep/2, "first burst")
	m := uniform(t, steppedSweep+8, "second burst")
	gap := []time.Duration{time.Millisecond, 0, step}[uniform(t, 3, "gap")]
	return horizonOp{Lim: c.Lim, Who: c.Who, Limit: l, N: n, Gap: gap, M: m, After: after, Req: c.Req,
		K: uniform(t, n+m, "k-th newest"), Then: []string{"settle", "refund", "retry"}[uniform(t, 3, "then")]}
}

// genHolds draws a probe of the in-flight log's estimate of a hold: two
// to four requests under an in-flight limit, each released a tenth to half
// its lease after its admission, then a burst one past its quota.
func genHolds(t *rapid.T, h *harness) op {
	c := genCall(t, h, "")
	l := rapid.SampledFrom(inFlightCatalogue).Draw(t, "holds limit")
	holds := make([]time.Duration, 2+uniform(t, 3, "holds"))
	for i := range holds {
		holds[i] = l.Window / time.Duration(2+uniform(t, 9, "hold"))
	}
	return holdsOp{Lim: c.Lim, Who: c.Who, Limit: l, Holds: holds, Req: c.Req}
}
