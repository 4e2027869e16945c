package model

import (
	"context"
	"errors"
	"fmt"
	stdlog "log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	slidelimit "github.com/slidelimit/slidelimit/core"
)

// op is one step of a sequence: a call, a group of concurrent calls, the
// clock moving, or a fault. Its String is Go, so that a shrunk sequence
// pastes into a regression test (see replay).
type op interface {
	fmt.Stringer
	run(h *harness)
}

// callRec is a call the sequence made, by its handle, so that later steps
// can retry it or refund its Result.
type callRec struct {
	call    allowOp
	res     slidelimit.Result
	settled int   // 1 + the cost it was last settled to; 0 if never
	now     int64 // µs, test clock: when it was decided (sequential modes)
	// until is when the request has left every window and lease it counts
	// in (µs, test clock): a settlement kept past it is dropped.
	until int64
	// unsure, lo and hi: a settle to lo or hi failed after it may have
	// run, and the client holds the request at either (or between).
	unsure bool
	lo, hi int
}

// bounds returns the units the client holds the request at: its cost, or
// lo to hi after a settle that may have run.
func (r *callRec) bounds() (lo, hi int) {
	if r.unsure {
		return r.lo, r.hi
	}
	return r.cost(), r.cost()
}

// cost is the units the call's request was recorded at, as last settled.
func (r *callRec) cost() int {
	if r.settled > 0 {
		return r.settled - 1
	}
	return r.call.Cost
}

// harness runs one sequence against real limiters and the model.
type harness struct {
	t         tester
	env       *env
	prefix    string
	clock     *testClock
	specs     []limiterSpec
	lims      []*slidelimit.Limiter
	ids       map[string]*identityModel
	tags      map[string]string // hash tag → identity
	local     []*localModel
	denials   *denialLog // every denial Redis gave a limiter with a deny cache
	calls     map[string]*callRec
	order     []string // handles of calls with request ids, oldest first
	ops       []op
	up        bool // Redis is running
	cut       bool // a partition cuts every process off from Redis (cutOp)
	migrating bool // a slot migration ran during the check

	observing string   // the failure kind of a decision made to observe a step (a refund's)
	hist      *history // the concurrent modes' record of every call

	anonSeq  int       // synthetic ids given to requests of random ids
	maybeRan time.Time // when a command last may have run after its caller gave up
	passOver []string  // failure kinds a replay passes over

	lastReply reply                     // the model's answer that Redis's last judged answer matched
	observed  []*slidelimit.Observation // per limiter, its latest Observation
	obsMu     sync.Mutex
	together  bool // the step makes calls at once: an Observation may be another call's

	// What the limiters keep to retry, by handle, and what their reports
	// of kept settlements must add up to, and do (replay_test.go).
	kept       map[string]*keptSettle
	replayWant []replayCount
	replayLogs []*replayLog
	waited     bool // a Wait ran: it refunds on its own, which the limiter may keep

	failure string // the first failure's kind; "" while none
	detail  string
	counted struct{ fallbacks, doubtful, lostSettles int }
}

func newHarness(t tester, e *env, specs []limiterSpec) (*harness, error) {
	h := &harness{t: t, env: e, prefix: newPrefix(e.name), clock: &testClock{}, specs: specs,
		ids: map[string]*identityModel{}, tags: map[string]string{}, calls: map[string]*callRec{}, up: true,
		denials: newDenialLog(len(specs)), kept: map[string]*keptSettle{}}
	for _, s := range specs {
		obs := new(slidelimit.Observation)
		h.observed = append(h.observed, obs)
		i := len(h.observed) - 1
		s.observe = func(_ context.Context, o slidelimit.Observation) {
			if s.DenyCache {
				h.denials.note(i, o, h.clock.Now())
			}
			h.obsMu.Lock()
			defer h.obsMu.Unlock()
			*obs = o
		}
		rl := &replayLog{}
		h.replayLogs = append(h.replayLogs, rl)
		h.replayWant = append(h.replayWant, replayCount{})
		s.logger = stdlog.New(rl)
		lim, err := newLimiter(e.clients[s.Process%len(e.clients)], h.prefix, h.clock.Now, s)
		if err != nil {
			return nil, err
		}
		h.lims = append(h.lims, lim)
		h.local = append(h.local, &localModel{replicas: max(1, s.Replicas), logs: map[string][]localEntry{}, leases: map[string][]localLease{}})
	}
	return h, nil
}

// fail records the first failure: its kind, which is the message rapid
// compares while it shrinks, and the detail, which it logs.
//
// A failure of a kind -model.ignore names is logged instead, and fail
// returns false: the caller then takes Redis's answer as the truth.
func (h *harness) fail(kind, format string, args ...any) bool {
	if h.failure != "" {
		return true
	}
	if ignored(kind) || slices.Contains(h.passOver, kind) {
		h.t.Logf("ignored: %s: %s", kind, fmt.Sprintf(format, args...))
		return false
	}
	h.failure = kind
	h.detail = fmt.Sprintf(format, args...)
	if journal != nil {
		journal(kind + ": " + h.detail + "\n  after the sequence\n" + h.sequence())
	}
	return true
}

// do runs o and logs it.
func (h *harness) do(o op) {
	h.ops = append(h.ops, o)
	h.t.Logf("%3d  %s", len(h.ops), o)
	o.run(h)
}

// identity returns the model of who, registering its hash tag.
func (h *harness) identity(who string) *identityModel {
	im := h.ids[who]
	if im == nil {
		im = newIdentity()
		h.ids[who] = im
		base, _, _ := splitName(who)
		key, err := slidelimit.Key(h.prefix, base, slidelimit.PerSecond(1))
		if err == nil {
			h.tags[hashTag(key)] = base
		}
	}
	return im
}

// hashTag returns what a key's {hash tag} holds.
func hashTag(key string) string {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return ""
	}
	j := strings.IndexByte(key[i+1:], '}')
	if j < 0 {
		return ""
	}
	return key[i+1 : i+1+j]
}

// splitName returns the identity, the level of a tenant's tree and
// whether it is the log of requests that a model identity (logName)
// names.
func splitName(name string) (who, level string, requests bool) {
	name, requests = strings.CutSuffix(name, "#req")
	who, level, _ = strings.Cut(name, "/")
	return who, level, requests
}

// stem returns the start of the keys of a model identity's logs: the
// identity's log key, "/" and the level, ":#req" for a log of requests.
func (h *harness) stem(name string) string {
	who, level, requests := splitName(name)
	key := stemKey(h.prefix, who)
	if level != "" {
		key += "/" + level
	}
	if requests {
		key += ":#req"
	}
	return key
}

// limitsOf returns the limits a call decides under: its tree's, its
// plan, or its limiter's own.
func (h *harness) limitsOf(c allowOp) []slidelimit.Limit {
	if c.Tree != nil {
		var limits []slidelimit.Limit
		for _, lv := range c.Tree {
			limits = append(limits, lv.Limits...)
		}
		return limits
	}
	if c.Plan != nil {
		return c.Plan
	}
	return h.specs[c.Lim].Limits
}

// levelsOf returns the level of each of a call's limits, nil unless it
// decides a tenant's tree.
func levelsOf(c allowOp) []string {
	var levels []string
	for _, lv := range c.Tree {
		for range lv.Limits {
			levels = append(levels, lv.Identity)
		}
	}
	return levels
}

// use notes the limits a call used on the identities whose logs they
// count.
func (h *harness) use(cl call) {
	for _, g := range groupsOf(cl) {
		h.identity(g.name).use(g.c.limits)
	}
}

// statesOf returns the states of each group's identity, or false if the
// model lost track of one of them.
func (h *harness) statesOf(gs []group) ([][]*state, bool) {
	states := make([][]*state, len(gs))
	for k, g := range gs {
		im := h.identity(g.name)
		if im.lost != "" {
			return nil, false
		}
		states[k] = im.states
	}
	return states, true
}

// maybeRun notes in the model that cl may have run, and been answered in
// any way keep allows (nil: any): each identity keeps its states, and
// adds those the decision leaves.
func (h *harness) maybeRun(cl call, keep func(reply) bool) {
	gs := groupsOf(cl)
	states, ok := h.statesOf(gs)
	if !ok {
		return
	}
	next := make([][]*state, len(gs))
	for k := range gs {
		next[k] = slices.Clone(states[k])
	}
	for _, co := range decideGroups(gs, cl, asIs, states) {
		if keep == nil || keep(co.r) {
			for k := range gs {
				next[k] = append(next[k], co.next[k])
			}
		}
	}
	for k, g := range gs {
		h.identity(g.name).settle(next[k])
	}
}

// invoke makes call c on its limiter.
func (h *harness) invoke(ctx context.Context, c allowOp) (slidelimit.Result, error) {
	lim := h.lims[c.Lim]
	ctx = callCtx(ctx, c.Req, c.ID)
	switch {
	case c.Peek && c.Plan != nil:
		return lim.PeekLimits(ctx, c.Who, c.Plan...)
	case c.Peek:
		return lim.Peek(ctx, c.Who)
	case c.Tree != nil:
		return lim.AllowTree(ctx, c.Who, c.Cost, c.Tree...)
	case c.Plan != nil:
		return lim.AllowLimits(ctx, c.Who, c.Cost, c.Plan...)
	case c.Cost == 1:
		return lim.Allow(ctx, c.Who)
	}
	return lim.AllowN(ctx, c.Who, c.Cost)
}

// fault describes what Redis was going through while a call was made.
type fault struct {
	down    bool          // stopped: no command reached it
	stalled time.Duration // paused this long: a command sent may run after
}

// settle judges call c, made at now (test clock) between a and b (wall
// clock) and answered res, err, and updates the model.
func (h *harness) settle(c allowOp, res slidelimit.Result, err error, now int64, a, b time.Time, f fault) {
	spec := h.specs[c.Lim]
	im := h.identity(c.Who)
	limits := h.limitsOf(c)
	if most := maxCost(limits, levelsOf(c)); !c.Peek && c.Cost > most {
		// A cost over the smallest quota is ErrInvalidCost, and records
		// nothing.
		if !errors.Is(err, slidelimit.ErrInvalidCost) || res.Allowed {
			h.fail(kindDecision, "%s: a cost over the largest the limits take (%d) = %s, %v; want ErrInvalidCost", c, most, resultString(res), err)
		}
		return
	}
	if !c.Peek {
		h.calls[c.Req] = &callRec{call: c, res: res, now: now, until: untilOf(now, limits)}
		if c.ID && !slices.Contains(h.order, c.Req) {
			h.order = append(h.order, c.Req)
		}
	}
	cl := h.callOf(c, limits, now, a, b)
	h.use(cl)
	if err != nil || res.Fallback {
		h.counted.fallbacks++
		h.settleFallback(c, spec, im, cl, res, err, f)
		return
	}
	if res.Shadow && !spec.Shadow {
		h.fail(kindDecision, "%s: a Shadow result from a limiter not in shadow mode: %+v", c, res)
		return
	}
	if spec.Shadow && !res.Shadow && !res.Allowed {
		h.fail(kindDecision, "%s: a denial from a limiter in shadow mode: %+v", c, res)
		return
	}
	raw := res
	if res.Shadow {
		raw.Allowed = false // shadow mode admits what the limits denied
	}
	if res.Cached {
		h.settleCached(c, spec, cl, raw)
		return
	}
	h.judge(c, cl, res, raw)
	h.checkShadowDenied(c, cl)
}

// callOf is call c as the model sends it to a state: made at now, run by
// Redis between a and b.
func (h *harness) callOf(c allowOp, limits []slidelimit.Limit, now int64, a, b time.Time) call {
	cl := call{who: c.Who, limits: limits, levels: levelsOf(c), cost: c.Cost, req: c.Req, now: now, ra: a, rb: b}
	switch {
	case c.Peek:
		cl.cost = 1
	case c.ID:
		cl.id = idOf(c.Req)
	default:
		cl.id, cl.anon = h.anonID(), true
	}
	return cl
}

// anonID returns a synthetic id for a request whose own id is random: the
// model refunds it by that id, and never retries it.
func (h *harness) anonID() string {
	h.anonSeq++
	return idOf(fmt.Sprintf("\x00anonymous %d", h.anonSeq))
}

// judge holds Redis's answer to cl (res as the limiter returned it, raw
// with shadow mode undone) to the model: the states that give the same
// answer are kept, and an answer none gives is a failure.
func (h *harness) judge(c fmt.Stringer, cl call, res, raw slidelimit.Result) {
	h.lastReply = reply{}
	if len(raw.Statuses) != len(cl.limits) {
		h.fail(kindDecision, "%s: %d statuses, want %d: %s", c, len(raw.Statuses), len(cl.limits), resultString(res))
		return
	}
	for i, l := range cl.limits {
		if raw.Statuses[i].Limit != l {
			h.fail(kindDecision, "%s: status %d is of %v, want %v", c, i, raw.Statuses[i].Limit, l)
			return
		}
		if lvl := ""; cl.levels != nil && raw.Statuses[i].Level != cl.levels[i] || cl.levels == nil && raw.Statuses[i].Level != lvl {
			h.fail(kindDecision, "%s: status %d is of level %q, want %q", c, i, raw.Statuses[i].Level, cl.levels[i])
			return
		}
	}
	if why := deciderConsistent(res); why != "" {
		h.fail(kindDecision, "%s: %s", c, why)
		return
	}
	gs := groupsOf(cl)
	states, ok := h.statesOf(gs)
	if !ok {
		return
	}
	next := make([][]*state, len(gs))
	matched := false
	var want []string
	for _, co := range decideGroups(gs, cl, asIs, states) {
		if co.r.matches(raw) {
			matched = true
			h.lastReply = co.r
			for k := range gs {
				next[k] = append(next[k], co.next[k])
			}
		} else if len(want) < 4 {
			want = append(want, fmt.Sprintf("%v\n      in %s", co.r, describeCombo(gs, co)))
		}
	}
	if matched {
		for k, g := range gs {
			if len(states[k]) > 1 || len(next[k]) > 1 {
				h.counted.doubtful++
			}
			h.identity(g.name).settle(next[k])
		}
		return
	}
	kind := h.classify(gs, states, cl, raw)
	if kind == kindDecision && h.observing != "" {
		kind = h.observing
	}
	n := 0
	for _, st := range states {
		n = max(n, len(st))
	}
	h.fail(kind, "%s at t=%dµs: Redis answered %s\n  the model (%d states) answers:\n    %s",
		c, cl.now, resultString(res), n, strings.Join(want, "\n    "))
	for _, g := range gs {
		h.identity(g.name).lose("a failure passed over") // -model.ignore: Redis's answer stands, unknown to the model
	}
}

// describeCombo writes the states a combination decided in.
func describeCombo(gs []group, co combo) string {
	var parts []string
	for k, g := range gs {
		d := co.from[k].describe(g.c)
		if len(gs) > 1 {
			d = fmt.Sprintf("%q: %s", g.name, d)
		}
		parts = append(parts, d)
	}
	return strings.Join(parts, "; ")
}

// classify names the kind of a failure to answer cl as Redis did (raw):
// a retried id Redis did not find where the model holds it, one Redis
// found where the model holds none, or another decision.
func (h *harness) classify(gs []group, states [][]*state, cl call, raw slidelimit.Result) string {
	for _, co := range decideGroups(gs, cl, asIs, states) {
		if !co.r.dup {
			continue
		}
		for _, alt := range decideGroups(gs, cl, foundNowhere, states) {
			if !alt.r.matches(raw) {
				continue
			}
			for _, s := range co.from {
				if s.x.holds(cl.id) {
					return kindRetryExact
				}
			}
			if slices.ContainsFunc(partsOf(cl.limits), func(p part) bool { return p.step == 0 }) {
				return kindRetryMixed
			}
			return kindRetryStepped
		}
	}
	if !cl.peek() && !cl.anon {
		for _, alt := range decideGroups(gs, cl, foundSomewhere, states) {
			if alt.r.matches(raw) {
				return kindRetryGhost
			}
		}
	}
	return kindDecision
}

// checkShadowDenied holds the Observation of the call just judged to the
// model: Observation.ShadowDenied lists the shadow limits (Limit.Shadow)
// "that would have denied the request had they been enforced", those
// whose count and cost exceed their quota.
func (h *harness) checkShadowDenied(c allowOp, cl call) {
	if h.failure != "" || h.together || len(h.lastReply.over) != len(cl.limits) {
		return
	}
	var want []slidelimit.Limit
	for i, l := range cl.limits {
		// "Only a request the enforced limits admitted counts."
		if l.Shadow && h.lastReply.over[i] && h.lastReply.allowed {
			want = append(want, l)
		}
	}
	h.obsMu.Lock()
	got := h.observed[c.Lim].ShadowDenied()
	h.obsMu.Unlock()
	if !slices.Equal(got, want) {
		h.fail(kindShadow, "%s: ShadowDenied() = %v, want %v (model: %v)", c, got, want, h.lastReply)
	}
}

// settleFallback judges a call the FailurePolicy decided: the policy's
// answer, made only while a fault outlasted the call's own timeout; and in
// the model, a command that may have run after all.
func (h *harness) settleFallback(c allowOp, spec limiterSpec, im *identityModel, cl call, res slidelimit.Result, err error, f fault) {
	switch {
	case err == nil || !res.Fallback:
		h.fail(kindDecision, "%s: a fallback must be marked Fallback and return an error wrapping ErrUnavailable: %s, %v", c, resultString(res), err)
		return
	case !isUnavailable(err):
		h.fail(kindDecision, "%s: error %v does not wrap ErrUnavailable", c, err)
		return
	case res.Shadow:
		h.fail(kindDecision, "%s: shadow mode applied to a fallback: %s", c, resultString(res))
		return
	}
	if h.reach() && !f.down {
		// TRYAGAIN is sent again "for as long as the call's timeout leaves
		// time for another attempt; then the policy decides": a call that
		// waited its timeout out while its identity's slot stayed split
		// (a migration slowed by a loaded host) may fall back.
		splitOut := errors.Is(err, slidelimit.ErrUnavailable) && strings.Contains(err.Error(), "TRYAGAIN") &&
			cl.rb.Sub(cl.ra) >= spec.Timeout*9/10 && h.env.mig.splitDuring(c.Who, cl.ra, cl.rb)
		excused := f.stalled > 0 && spec.Timeout > 0 && spec.Timeout < 2*f.stalled+stallSlack ||
			!spec.strict() || time.Since(h.env.healed) < healTime || splitOut
		if !excused {
			mig := "no migration"
			if m := h.env.mig; m != nil {
				mig = fmt.Sprintf("the latest migration moved %q's slot from %v before the call, ended %v", m.who, cl.ra.Sub(m.began).Round(time.Millisecond), m.done())
			}
			h.fail(kindFallback,
				"%s: limiter %d (timeout %v, %s) fell back (%v) after %v while Redis answered (stalled %v; %s): %s",
				c, c.Lim, spec.Timeout, policyName(spec.Policy), err, cl.rb.Sub(cl.ra).Round(time.Millisecond), f.stalled, mig, resultString(res))
			return
		}
	}
	switch spec.Policy {
	case slidelimit.FailOpen:
		if !res.Allowed {
			h.fail(kindDecision, "%s: FailOpen denied: %s", c, resultString(res))
			return
		}
	case slidelimit.FailClosed:
		if res.Allowed || res.RetryAfter != time.Second {
			h.fail(kindDecision, "%s: FailClosed must deny with a RetryAfter of 1s: %s", c, resultString(res))
			return
		}
	case slidelimit.FailLocal:
		if why := h.local[c.Lim].judge(res, cl, c.Peek); why != "" {
			if h.fail(kindLocal, "%s: %s\n  result: %s", c, why, resultString(res)) {
				return
			}
			if res.Allowed && !c.Peek {
				h.local[c.Lim].record(cl)
			}
		}
	}
	if h.reach() && !f.down {
		h.mayHaveRun(cl, f)
	}
}

// mayHaveRun notes in the model that cl's command may have reached Redis
// and run after its caller gave up on it: by the end of the stall, or a
// little after a timeout.
func (h *harness) mayHaveRun(cl call, f fault) {
	h.mayRunUntil(cl.rb.Add(f.stalled))
	cl.rb = cl.rb.Add(f.stalled + maybeRunSlack)
	h.counted.doubtful++
	h.maybeRun(cl, nil)
}

// maybeRunSlack is how long after its caller gave up a command may still
// run in Redis.
const maybeRunSlack = time.Second

// mayRunUntil notes that a command may run in Redis until about t: the
// model reads the logs (observeLogs) only a while after.
func (h *harness) mayRunUntil(t time.Time) {
	if t.After(h.maybeRan) {
		h.maybeRan = t
	}
}

// stallSlack is what a loaded host may add to a stall before a call whose
// timeout is at least twice the stall may be said to have waited too long.
const stallSlack = 500 * time.Millisecond

// healTime is how long after Redis comes back (or has its connections
// killed) a call may still fall back: the circuit breaker's cooldown, a
// probe, and a dial.
const healTime = 2 * time.Second

// settleCached judges a denial from the deny cache: Redis would deny it
// too, in some state the model holds.
func (h *harness) settleCached(c allowOp, spec limiterSpec, cl call, raw slidelimit.Result) {
	if !spec.DenyCache {
		h.fail(kindDecision, "%s: a Cached result from a limiter without a deny cache: %s", c, resultString(raw))
		return
	}
	if raw.Allowed {
		h.fail(kindDecision, "%s: the deny cache admitted: %s", c, resultString(raw))
		return
	}
	if why := h.denials.answers(c.Lim, c.Who, cl.cost, cl.now, raw); why != "" {
		h.fail(kindDecision, "%s at t=%dµs: a cached denial %s\n  result: %s", c, cl.now, why, resultString(raw))
		return
	}
	if h.denials.stale(c.Lim, c.Who, cl.now) {
		return // a refund or reset elsewhere: the cache may deny for the rest of its RetryAfter
	}
	gs := groupsOf(cl)
	states, ok := h.statesOf(gs)
	if !ok {
		return
	}
	var want []string
	for _, co := range decideGroups(gs, cl, asIs, states) {
		if !co.r.allowed {
			return
		}
		want = append(want, fmt.Sprintf("%v in %s", co.r, describeCombo(gs, co)))
	}
	h.fail(kindDecision, "%s at t=%dµs: the deny cache denied what Redis would admit\n  result: %s\n  model: %s",
		c, cl.now, resultString(raw), strings.Join(want, "\n    "))
}

func resultString(r slidelimit.Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "{Allowed: %v, Limit: %v, Remaining: %d, RetryAfter: %v, ResetAfter: %v", r.Allowed, r.Limit, r.Remaining, r.RetryAfter, r.ResetAfter)
	for _, f := range []struct {
		on   bool
		name string
	}{{r.Fallback, "Fallback"}, {r.Shadow, "Shadow"}, {r.Cached, "Cached"}} {
		if f.on {
			b.WriteString(", " + f.name)
		}
	}
	if len(r.Statuses) > 0 {
		b.WriteString(", Statuses: [")
		for i, s := range r.Statuses {
			if i > 0 {
				b.WriteString(" ")
			}
			fmt.Fprintf(&b, "{%v %d %v %v}", s.Limit, s.Remaining, s.RetryAfter, s.ResetAfter)
		}
		b.WriteString("]")
	}
	b.WriteString("}")
	return b.String()
}

// allowOp is one call: Allow, AllowN or AllowLimits, or Peek/PeekLimits.
type allowOp struct {
	Lim  int
	Who  string // the identity, or the tenant of Tree
	Cost int
	Plan plan               // nil: the limiter's own limits
	Tree []slidelimit.Level // AllowTree of Who's tree, if set
	Req  string             // the call's handle, and its request id if ID
	ID   bool               // carries ContextWithRequestID(Req)
	Peek bool
}

func (c allowOp) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "allowOp{Lim: %d, Who: %q", c.Lim, c.Who)
	if c.Peek {
		b.WriteString(", Peek: true")
	} else {
		fmt.Fprintf(&b, ", Cost: %d", c.Cost)
	}
	if c.Plan != nil {
		b.WriteString(", Plan: " + planString(c.Plan))
	}
	if c.Tree != nil {
		b.WriteString(", Tree: " + treeString(c.Tree))
	}
	if c.Req != "" {
		fmt.Fprintf(&b, ", Req: %q", c.Req)
	}
	if c.ID {
		b.WriteString(", ID: true")
	}
	b.WriteString("}")
	return b.String()
}

func (c allowOp) run(h *harness) {
	now := h.clock.freeze()
	defer h.clock.unfreeze()
	a := time.Now()
	res, err := h.invoke(context.Background(), c)
	h.settle(c, res, err, now, a, time.Now(), fault{down: !h.reach()})
}

// burstOp is N calls of one kind made one after another in one instant of
// the test clock, handles Req.0 … Req.N-1.
type burstOp struct {
	Lim  int
	Who  string
	Cost int
	Plan plan
	N    int
	Req  string
	ID   bool
}

func (o burstOp) String() string {
	return fmt.Sprintf("burstOp{Lim: %d, Who: %q, Cost: %d, Plan: %s, N: %d, Req: %q, ID: %v}", o.Lim, o.Who, o.Cost, planString(o.Plan), o.N, o.Req, o.ID)
}

func (o burstOp) run(h *harness) {
	now := h.clock.freeze()
	defer h.clock.unfreeze()
	for i := range o.N {
		c := allowOp{Lim: o.Lim, Who: o.Who, Cost: o.Cost, Plan: o.Plan, Req: fmt.Sprintf("%s.%d", o.Req, i), ID: o.ID}
		a := time.Now()
		res, err := h.invoke(context.Background(), c)
		h.settle(c, res, err, now, a, time.Now(), fault{down: !h.reach()})
		if h.failure != "" {
			h.t.Logf("     call %d of the burst: %s", i, c)
			return
		}
	}
}

// retryOp makes the call of handle Of again, with its request id.
type retryOp struct{ Of string }

func (o retryOp) String() string { return fmt.Sprintf("retryOp{Of: %q}", o.Of) }

func (o retryOp) run(h *harness) {
	rec := h.calls[o.Of]
	if rec == nil || !rec.call.ID {
		return
	}
	rec.call.run(h)
}

// refundOp refunds the latest Result of the call of handle Of, through
// limiter Via.
type refundOp struct {
	Of  string
	Via int
}

func (o refundOp) String() string { return fmt.Sprintf("refundOp{Of: %q, Via: %d}", o.Of, o.Via) }

func (o refundOp) run(h *harness) { settleOp{Of: o.Of, Via: o.Via, Kind: "refund"}.run(h) }

// settleOp corrects the latest Result of the call of handle Of through
// limiter Via: Kind "refund" (Refund), "settle" (Settle to Cost, Twice:
// twice over), "release" (Release), "renew" (Renew) or "shift" (Shift by
// D).
type settleOp struct {
	Of    string
	Via   int
	Kind  string
	Cost  int
	Twice bool
	D     time.Duration
	// Pause holds Redis (CLIENT PAUSE) while the correction is sent: one
	// through a limiter of a shorter timeout fails, and runs when the pause
	// ends, a lost reply.
	Pause time.Duration
}

func (o settleOp) String() string {
	pause := ""
	if o.Pause > 0 {
		pause = ", Pause: " + durString(o.Pause)
	}
	if o.Kind == "shift" {
		return fmt.Sprintf("settleOp{Of: %q, Via: %d, Kind: %q, D: %s%s}", o.Of, o.Via, o.Kind, durString(o.D), pause)
	}
	return fmt.Sprintf("settleOp{Of: %q, Via: %d, Kind: %q, Cost: %d, Twice: %v%s}", o.Of, o.Via, o.Kind, o.Cost, o.Twice, pause)
}

// call makes the correction through lim.
func (o settleOp) call(lim *slidelimit.Limiter, r slidelimit.Result) error {
	ctx := context.Background()
	switch o.Kind {
	case "settle":
		return lim.Settle(ctx, r, o.Cost)
	case "release":
		return lim.Release(ctx, r)
	case "renew":
		return lim.Renew(ctx, r)
	case "shift":
		return lim.Shift(ctx, r, o.D)
	}
	return lim.Refund(ctx, r)
}

func (o settleOp) run(h *harness) {
	rec := h.calls[o.Of]
	if rec == nil {
		return
	}
	now := h.clock.freeze()
	defer h.clock.unfreeze()
	lo, hi := rec.bounds() // what the client sends as the request's units
	recordedCost := rec.cost()
	r := rec.res
	recorded := r.Allowed && !r.Fallback && !r.Shadow && !r.Cached && len(r.Statuses) > 0 && rec.call.ID
	// A Settle, Refund or Release carries the one its request's limiter
	// keeps (Limiter.Settle: "its cost, unless it names one"); units is
	// the cost it settles to, -1 for none.
	units := -1
	switch o.Kind {
	case "settle":
		units = o.Cost
	case "refund":
		units = 0
	}
	kept := h.kept[o.Of]
	if kept != nil && keeps(o.Kind) && units < 0 {
		units = kept.units
	}
	if recorded {
		// A renewed lease, or units moved later, keep a kept settlement
		// longer.
		switch o.Kind {
		case "renew":
			rec.until = max(rec.until, now+leaseOf(h.limitsOf(rec.call)).Microseconds())
		case "shift":
			rec.until += (o.D + longestStep(h.limitsOf(rec.call))).Microseconds()
		}
	}
	var until time.Time
	if o.Pause > 0 && h.reach() {
		until = h.env.pause(o.Pause)
	}
	a := time.Now()
	err := o.call(h.lims[o.Via], rec.res)
	firstErr := err
	if err == nil && o.Twice {
		// Settling is retry-safe: "settling twice to the same cost changes
		// nothing the second time".
		err = o.call(h.lims[o.Via], rec.res)
	}
	if !until.IsZero() {
		// A call that gave up ran when the pause ended, or still may.
		sleepUntil(until)
		h.mayRunUntil(time.Now().Add(maybeRunSlack))
	}
	b := time.Now()
	if units >= 0 && r.Allowed && !r.Fallback && !r.Shadow && !r.Cached {
		// What the client then holds the request at (settle.go): the
		// target if a call to it answered, else anything from where it
		// was to the target, which a later settle lands on from either.
		to := units
		switch {
		case firstErr == nil, errors.Is(firstErr, slidelimit.ErrPastHorizon):
			// ErrPastHorizon: the other logs took it, and the client
			// holds it at its target (settle.go).
			rec.settled, rec.unsure = to+1, false
		case isUnavailable(firstErr):
			rec.lo, rec.hi, rec.unsure = min(lo, to), max(hi, to), true
			h.counted.lostSettles++
		}
	}
	limits := h.limitsOf(rec.call)
	cl := h.callOf(rec.call, limits, now, a, b)
	if r.Local && o.Kind != "renew" && o.Kind != "shift" {
		h.local[rec.call.Lim].release(rec.call.Req) // Shift and Renew keep FailLocal's places in flight
	}
	act := settleAct{id: idOf(rec.call.Req), at: rec.now, lo: lo, old: hi, units: -1, now: now, ra: a, rb: b}
	switch o.Kind {
	case "refund", "settle", "release":
		act.units, act.lease = units, leaseRelease
	case "renew":
		d := leaseOf(limits).Microseconds()
		act.lease, act.renewTo = leaseRenew, now+d
		if d == 0 {
			recorded = false // Renew of a request with no place in flight does nothing
		}
	case "shift":
		act.shift = o.D.Microseconds()
	}
	if err != nil && (o.Kind != "renew" || !errors.Is(err, slidelimit.ErrLeaseEnded)) && !errors.Is(err, slidelimit.ErrPastHorizon) {
		if !isUnavailable(err) {
			h.fail(kindDecision, "%s: %s = %v, want nil or an error wrapping ErrUnavailable", o, o.Kind, err)
		}
		stalled := o.Pause > 0 && h.specs[o.Via].Timeout < 2*o.Pause+stallSlack
		if h.reach() && h.specs[o.Via].strict() && time.Since(h.env.healed) > healTime && !stalled {
			h.fail(kindFallback, "%s: %s = %v while Redis answered", o, o.Kind, err)
		}
		if recorded && h.reach() {
			for _, g := range groupsOf(cl) {
				h.identity(g.name).maybe(func(s *state) []*state { return h.settleIn(s, g, cl, act, a, b, -1, -1) })
			}
		}
		if recorded && keeps(o.Kind) && isUnavailable(err) {
			// Kept by the limiter that admitted it, in place of any it
			// kept; and drained at once if Redis answers (a lost reply,
			// a breaker still open), at this step's now.
			h.kept[o.Of] = &keptSettle{units: units, by: rec.call.Lim}
			if h.reach() {
				h.drain(now)
			}
		}
		return
	}
	if kept != nil && keeps(o.Kind) && recorded {
		// This settlement carried the kept one, and landed.
		delete(h.kept, o.Of)
		h.replayWant[kept.by].landed++
		h.checkReplays()
	}
	switch {
	case o.Kind == "refund" && r.Allowed && !r.Fallback && !r.Shadow && !r.Cached:
		// "A Refund or Reset through this limiter clears the identity's
		// entry"; refunding a Result that was not admitted "does nothing".
		h.forget(o.Via, rec.call.Who)
	case o.Kind == "refund":
	default:
		for i := range h.lims {
			h.denials.staleFrom(i, rec.call.Who) // Settle, Release, Renew and Shift clear no deny cache the model knows of
		}
	}
	if recorded {
		ended := -1 // the leases a renewal found: any
		if o.Kind == "renew" {
			ended = 1
			if err != nil {
				ended = 0
			}
		}
		// ErrPastHorizon: a stepped part had forgotten the request while
		// it still counted there (pastHorizon), for any limit counting
		// that log, not only the request's own.
		past := errors.Is(err, slidelimit.ErrPastHorizon)
		may := (units >= 0 && keeps(o.Kind) || o.Kind == "shift" && act.shift > 0) && recordedCost > 0
		if past && !may {
			h.fail(kindDecision, "%s: %s = %v, which the request, decided at %dµs at %d units, cannot give", o, o.Kind, err, rec.now, recordedCost)
			return
		}
		nstepped := 0
		for _, g := range groupsOf(cl) {
			if slices.ContainsFunc(g.parts, func(p part) bool { return p.step > 0 }) {
				nstepped++
			}
		}
		horizon := -1 // whether a stepped part may have forgotten it: either
		switch {
		case may && !past:
			horizon = 0
		case past && nstepped == 1:
			horizon = 1
		}
		var lost []string
		for _, g := range groupsOf(cl) {
			im := h.identity(g.name)
			before := len(im.states)
			im.each(func(s *state) []*state { return h.settleIn(s, g, cl, act, a, b, ended, horizon) })
			if before > 0 && len(im.states) == 0 && im.lost == "" {
				lost = append(lost, g.name)
			}
		}
		if len(lost) > 0 {
			kind := kindLease
			if o.Kind != "renew" {
				kind = kindHorizon // settleIn narrows a settlement's states only by its horizon
			}
			h.fail(kind, "%s at t=%dµs: %s = %v, which no state of the model of %q gives", o, now, o.Kind, err, lost)
			for _, g := range groupsOf(cl) {
				h.identity(g.name).lose("a failure passed over")
			}
			return
		}

	}
	// Observe what it gave back: a Peek under the call's limits (a tree's
	// own level's), through the limiter that corrected it, which the model
	// holds to the count it left.
	peekLimits := limits
	if rec.call.Tree != nil {
		peekLimits = nil
		for i, l := range limits {
			if cl.levels[i] == "" {
				peekLimits = append(peekLimits, l)
			}
		}
	}
	h.clock.unfreeze()
	if len(peekLimits) > 0 {
		peek := allowOp{Lim: o.Via, Who: rec.call.Who, Plan: slices.Clone(peekLimits), Req: rec.call.Req + ".peek", Peek: true}
		h.observing = kindRefund
		if o.Kind != "refund" {
			h.observing = kindSettle
		}
		peek.run(h)
		h.observing = ""
	}
	h.clock.freeze()
}

// settleIn returns the states a correction act of the request cl leaves in
// s, whose logs group g holds, run between a and b; with ended 0 or 1,
// only those where the request held (1) or did not hold (0) a place in
// flight of g; with horizon 0 or 1, only those where no stepped log of g
// (0), or one (1), may have forgotten it (pastHorizon).
func (h *harness) settleIn(s *state, g group, cl call, act settleAct, a, b time.Time, ended, horizon int) []*state {
	steps := stepsOfParts(g.parts)
	if strings.HasSuffix(g.name, "#req") {
		act.lo, act.old = 1, 1 // settle.lua: "one unit a request, refunded only"
		if act.units != 0 {
			act.units = -1
		}
	}
	hasLease := slices.Contains(steps, inflightStep)
	var out []*state
	for _, x := range expire(s, steps, a, b) {
		if horizon >= 0 && pastHorizon(x, steps, act.id, act.at, act.now) != (horizon == 1) {
			continue
		}
		next, leases := x.settle(act, steps)
		if ended >= 0 && hasLease && (leases > 0) != (ended == 1) {
			continue
		}
		out = append(out, next...)
	}
	return out
}

// forget notes that limiter via cleared its deny cache entry of who, and
// that every other limiter's may now be stale.
func (h *harness) forget(via int, who string) {
	for i := range h.lims {
		if i == via {
			h.denials.forget(i, who)
		} else {
			h.denials.staleFrom(i, who)
		}
	}
}

// resetOp resets an identity through a limiter.
type resetOp struct {
	Lim int
	Who string
}

func (o resetOp) String() string { return fmt.Sprintf("resetOp{Lim: %d, Who: %q}", o.Lim, o.Who) }

func (o resetOp) run(h *harness) {
	err := h.lims[o.Lim].Reset(context.Background(), o.Who)
	im := h.identity(o.Who)
	// Limiter.Reset: the exact log always, and the stepped logs of the
	// limiter's own steps.
	var steps []int64
	for _, s := range stepsOf(h.specs[o.Lim].Limits) {
		if s != 0 && resetForgets(h.specs[o.Lim].Limits, s) {
			steps = append(steps, s)
		}
	}
	forget := func(s *state) []*state {
		s.reset(steps)
		return []*state{s}
	}
	if err != nil {
		if !isUnavailable(err) {
			h.fail(kindDecision, "%s: Reset = %v", o, err)
		}
		if h.reach() {
			im.maybe(forget)
		}
		return
	}
	h.forget(o.Lim, o.Who)
	if im.lost != "" {
		// Found again if it forgot every log the identity used meanwhile.
		all := true
		for s := range im.usedSteps {
			all = all && (s == 0 || resetForgets(h.specs[o.Lim].Limits, s))
		}
		if all {
			im.lost, im.states = "", []*state{newState()}
		}
		return
	}
	im.each(forget)
}

// advanceOp moves the test clock forward.
type advanceOp struct{ D time.Duration }

func (o advanceOp) String() string { return fmt.Sprintf("advanceOp{D: %s}", durString(o.D)) }

func (o advanceOp) run(h *harness) { h.clock.advance(o.D) }

// waitOp is WaitN with a deadline D, alone, in one instant of the test
// clock: it admits at once, or is refused at once because the request
// cannot be admitted before the deadline, or (when the deadline is long)
// waits it out and returns with nothing recorded.
type waitOp struct {
	Lim  int
	Who  string
	Cost int
	Req  string
	ID   bool
	D    time.Duration
}

func (o waitOp) String() string {
	return fmt.Sprintf("waitOp{Lim: %d, Who: %q, Cost: %d, Req: %q, ID: %v, D: %s}", o.Lim, o.Who, o.Cost, o.Req, o.ID, durString(o.D))
}

func (o waitOp) run(h *harness) {
	now := h.clock.freeze()
	defer h.clock.unfreeze()
	defer h.afterWait(now)
	c := allowOp{Lim: o.Lim, Who: o.Who, Cost: o.Cost, Req: o.Req, ID: o.ID}
	ctx, cancel := context.WithTimeout(callCtx(context.Background(), o.Req, o.ID), o.D)
	defer cancel()
	a := time.Now()
	res, err := h.lims[o.Lim].WaitN(ctx, o.Who, o.Cost)
	b := time.Now()
	if err != nil {
		time.Sleep(quiesce) // a decision in flight as the deadline came is refunded
	}
	h.settleWait(c, res, err, now, a, b)
}

// settleWait judges a Wait's outcome. Its queue decides with the
// limiter's own limits, under the waiter's request id; if a Block may
// have been in force since the Wait began (at a), it may also have
// admitted, found the block and refunded
// (WaitN: "refunds the admission if a block is in force"), which the model
// holds as an admission and refund that may have come first.
func (h *harness) settleWait(c allowOp, res slidelimit.Result, err error, now int64, a, b time.Time) {
	im := h.identity(c.Who)
	limits := h.limitsOf(c)
	im.use(limits)
	if h.blockMay(im, a) && h.reach() {
		cl := h.callOf(c, limits, now, a, b)
		h.mayRunUntil(b)
		im.maybe(func(s *state) []*state { return admitThenRefund(s, cl) })
	}
	switch {
	case res.Fallback && errors.Is(err, slidelimit.ErrWouldExceedDeadline):
		// A fallback denial waited out: FailClosed's second, or
		// FailLocal's share.
		h.calls[c.Req] = &callRec{call: c, res: res}
		if res.Allowed || h.specs[c.Lim].Policy == slidelimit.FailOpen {
			h.fail(kindDecision, "%s: Wait refused with an admitting fallback: %s, %v", c, resultString(res), err)
		}
		if h.reach() {
			h.mayHaveRun(h.callOf(c, limits, now, a, b), fault{})
		}
	case err == nil || res.Fallback:
		h.settle(c, res, err, now, a, b, fault{down: !h.reach()})
	case errors.Is(err, slidelimit.ErrWouldExceedDeadline) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		h.calls[c.Req] = &callRec{call: c, res: res}
		if c.ID && !slices.Contains(h.order, c.Req) {
			h.order = append(h.order, c.Req)
		}
		// Refused: the limits (or a block) must have had no room.
		if res.Allowed {
			h.fail(kindDecision, "%s: Wait refused (%v) with an admitting Result: %s", c, err, resultString(res))
			return
		}
		if len(res.Statuses) > 0 && !res.Cached {
			h.judge(c, h.callOf(c, limits, now, a, b), res, res)
			return
		}
		if !errors.Is(err, slidelimit.ErrWouldExceedDeadline) && h.specs[c.Lim].Policy == slidelimit.FailLocal {
			// The queue may have fallen back for it after it left, and
			// FailLocal kept that admission (WaitN).
			h.local[c.Lim].mayRecord(h.callOf(c, limits, now, a, b.Add(maybeRunSlack)))
		}
		if !errors.Is(err, slidelimit.ErrWouldExceedDeadline) {
			// The context ended while the queue waited for Redis: "having
			// recorded nothing for this caller (a decision Redis was making
			// for it is passed to the next waiter of the same cost, or
			// refunded)". It may have been denied, or admitted and refunded;
			// "but for a caller whose context carries an id of
			// ContextWithRequestID: an admission Redis made for it stays
			// recorded under its id".
			if h.reach() {
				cl := h.callOf(c, limits, now, a, b.Add(maybeRunSlack))
				h.mayRunUntil(b)
				if c.ID {
					im.maybe(func(s *state) []*state { return run(s, cl) })
				} else {
					im.maybe(func(s *state) []*state { return admitThenRefund(s, cl) })
				}
			}
			return
		}
		if h.blockMay(im, b) || im.lost != "" {
			return
		}
		spec := h.specs[c.Lim]
		// A stale deny cache, or a fallback denial (Redis down, or a short
		// timeout) may refuse; else the limits must deny in some state.
		if h.denials.stale(c.Lim, c.Who, now) || spec.Policy != slidelimit.FailOpen && (!h.reach() || !spec.strict()) {
			return
		}
		cl := h.callOf(c, limits, now, a, b)
		for _, s := range im.states {
			for _, o := range decide(s, cl, asIs) {
				if !o.r.allowed {
					return
				}
			}
		}
		h.fail(kindDecision, "t=%dµs: %s: Wait refused (%v) a request the limits have room for: %s", now, c, err, resultString(res))
	default:
		h.fail(kindDecision, "%s: Wait = %s, %v", c, resultString(res), err)
	}
}

// answeredAfter reports whether a waiter of results was answered by its
// queue's runner (admitted, refused, or told it could not be admitted in
// time), not by its own context ending: the runner had then ended every
// decision it began for the waiters before it.
func answeredAfter(results []waitResult) bool {
	for _, g := range results {
		if g.err == nil || errors.Is(g.err, slidelimit.ErrWouldExceedDeadline) {
			return true
		}
	}
	return false
}

// blockMay reports whether a Block of im may be in force at wall time t.
func (h *harness) blockMay(im *identityModel, t time.Time) bool {
	return !im.blockHi.IsZero() && t.Before(im.blockHi.Add(time.Millisecond))
}

// waitResult is what one waiter of a waitRaceOp was told, and when it
// asked (a) and was answered (b).
type waitResult struct {
	c    allowOp
	res  slidelimit.Result
	err  error
	a, b time.Time
}

// waitRaceOp is a queue of waiters on one limiter and identity, the head
// with handle Req (and its id if ID) leaving after Cancel while Redis may
// still be deciding for it (paused for Pause), Others waiters behind it of
// the same cost with deadlines; their handles are Req.1 … Req.Others.
type waitRaceOp struct {
	Lim    int
	Who    string
	Cost   int
	Req    string
	ID     bool
	Cancel time.Duration
	Others int
	Pause  time.Duration
}

func (o waitRaceOp) String() string {
	return fmt.Sprintf("waitRaceOp{Lim: %d, Who: %q, Cost: %d, Req: %q, ID: %v, Cancel: %s, Others: %d, Pause: %s}",
		o.Lim, o.Who, o.Cost, o.Req, o.ID, durString(o.Cancel), o.Others, durString(o.Pause))
}

func (o waitRaceOp) run(h *harness) {
	h.together = true
	defer func() { h.together = false }()
	now := h.clock.freeze()
	defer h.clock.unfreeze()
	defer h.afterWait(now)
	if !h.reach() {
		return
	}
	results := make([]waitResult, 1+o.Others)
	if o.Pause > 0 {
		// A decision made for a waiter that left is handed on or refunded
		// when Redis answers, after the pause: give the queue that long.
		defer sleepUntil(h.env.pause(o.Pause).Add(quiesce))
	}
	var wg sync.WaitGroup
	start := time.Now()
	for i := range results {
		c := allowOp{Lim: o.Lim, Who: o.Who, Cost: o.Cost, Req: o.Req, ID: o.ID}
		ctx, cancel := context.WithCancel(context.Background())
		if i > 0 {
			c.Req, c.ID = fmt.Sprintf("%s.%d", o.Req, i), false
			ctx, cancel = context.WithTimeout(context.Background(), o.Pause+time.Second)
		} else {
			time.AfterFunc(o.Cancel, cancel)
		}
		ctx = callCtx(ctx, c.Req, c.ID)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cancel()
			a := time.Now()
			res, err := h.lims[o.Lim].WaitN(ctx, o.Who, o.Cost)
			results[i] = waitResult{c: c, res: res, err: err, a: a, b: time.Now()}
		}()
		time.Sleep(2 * time.Millisecond)
	}
	wg.Wait()
	end := time.Now().Add(o.Pause + maybeRunSlack)
	h.mayRunUntil(time.Now().Add(o.Pause))
	// Which waiter got which admission is the queue's business; the model
	// holds the admissions to the limits' room, one after another at now,
	// the head's under its own id only if the head itself was admitted
	// (WaitN: a waiter that leaves has "recorded nothing for this
	// caller"), the others' under ids the model does not know.
	im := h.identity(o.Who)
	limits := h.specs[o.Lim].Limits
	im.use(limits)
	admitted := 0
	var fellBack []waitResult
	for _, g := range results {
		h.calls[g.c.Req] = &callRec{call: g.c, res: g.res}
		if g.c.ID && !slices.Contains(h.order, g.c.Req) {
			h.order = append(h.order, g.c.Req)
		}
		switch {
		case g.err == nil && g.res.Allowed && !g.res.Fallback && !g.res.Shadow:
			admitted++
		case g.res.Fallback:
			fellBack = append(fellBack, g)
			if !errors.Is(g.err, slidelimit.ErrWouldExceedDeadline) {
				h.settle(g.c, g.res, g.err, now, g.a, g.b, fault{stalled: o.Pause})
			}
		}
	}
	if im.lost != "" || h.failure != "" {
		return
	}
	headAdmitted := results[0].err == nil && results[0].res.Allowed && !results[0].res.Fallback
	callFor := func(i int) call {
		c := call{limits: limits, cost: o.Cost, req: fmt.Sprintf("%s.waiter%d", o.Req, i), now: now, ra: start, rb: end}
		c.id, c.anon = h.anonID(), true
		if i == 0 && headAdmitted && o.ID {
			c.id, c.anon, c.req = idOf(o.Req), false, o.Req
		}
		return c
	}
	// The head left while the queue's runner may have been deciding for
	// it: Redis stalled (Pause), or slow, as a Cluster just resharded or a
	// loaded host is.
	headLeft := errors.Is(results[0].err, context.Canceled)
	if headLeft && !answeredAfter(results[1:]) {
		// No waiter behind it was answered by the runner, so nothing shows
		// that its decision for the head has ended: it may run for the
		// limiter's timeout.
		h.mayRunUntil(results[0].a.Add(h.specs[o.Lim].Timeout + maybeRunSlack))
	}
	headOwn := o.ID && !headAdmitted && (o.Pause > 0 || headLeft)
	if headOwn {
		// WaitN: an admission Redis made for the head that left "stays
		// recorded under its id, for it is its own": decided before the
		// waiters behind it were, for the runner decides for one waiter
		// at a time, in order.
		head := callFor(len(results))
		head.id, head.anon, head.req = idOf(o.Req), false, o.Req
		im.maybe(func(s *state) []*state { return run(s, head) })
	}
	if h.blockMay(im, start) {
		// While a Block may be in force the queue may also have admitted
		// a waiter, found the block and refunded (WaitN: "refunds the
		// admission if a block is in force"), under the head's own id or
		// another's, before what stands: as settleWait holds it.
		for i := range results {
			cl := callFor(2*len(results) + admitted + 1 + i)
			if i == 0 && o.ID {
				cl.id, cl.anon, cl.req = idOf(o.Req), false, o.Req
			}
			im.maybe(func(s *state) []*state { return admitThenRefund(s, cl) })
		}
	}
	var calls []call
	for i := range admitted {
		calls = append(calls, callFor(i))
	}
	before := len(im.states)
	var why []string
	im.each(func(s *state) []*state {
		out := []*state{s}
		for _, cl := range calls {
			var next []*state
			for _, x := range out {
				for _, o := range decide(x, cl, asIs) {
					if o.r.allowed && !o.r.dup {
						next = append(next, o.next)
					} else if len(why) < 3 {
						why = append(why, fmt.Sprintf("%v in %s", o.r, x.describe(cl)))
					}
				}
			}
			out = next
		}
		return out
	})
	if len(im.states) == 0 && im.lost == "" {
		h.fail(kindDecision, "%s at t=%dµs: %d waiters admitted, which no state of the model (%d) has room for: %s",
			o, now, admitted, before, strings.Join(why, "; "))
		im.lose("a failure passed over")
		return
	}
	// What the queue may also have done, unseen: a denial (its records),
	// an admission for a waiter that left and no one took (refunded), and
	// decisions that timed out and ran after all.
	deny := callFor(admitted)
	im.maybe(func(s *state) []*state {
		var out []*state
		for _, o := range decide(s, deny, asIs) {
			if !o.r.allowed {
				out = append(out, o.next)
			}
		}
		return out
	})
	if o.Pause > 0 && !headOwn {
		head := callFor(0)
		im.maybe(func(s *state) []*state { return admitThenRefund(s, head) })
	}
	// A waiter whose context ended while Redis decided for it: "a decision
	// Redis was making for it is passed to the next waiter of the same
	// cost, or refunded", Redis or no pause.
	for i, g := range results {
		left := errors.Is(g.err, context.Canceled) || errors.Is(g.err, context.DeadlineExceeded) && !errors.Is(g.err, slidelimit.ErrWouldExceedDeadline)
		if !left || i == 0 && (headOwn || o.Pause > 0) {
			continue
		}
		cl := callFor(admitted + 1 + len(results) + i)
		if i == 0 && o.ID {
			cl.id, cl.anon, cl.req = idOf(o.Req), false, o.Req
			im.maybe(func(s *state) []*state { return run(s, cl) })
			continue
		}
		im.maybe(func(s *state) []*state { return admitThenRefund(s, cl) })
	}
	if timedOut := o.Pause > 0 && h.specs[o.Lim].Timeout < 2*o.Pause+stallSlack; timedOut || len(fellBack) > 0 {
		for i := range 1 + o.Others {
			cl := callFor(admitted + 1 + i)
			if i == 0 && o.ID {
				cl.id, cl.anon = idOf(o.Req), false
			}
			im.maybe(func(s *state) []*state { return run(s, cl) })
		}
	}
}

// stallOp pauses Redis for Pause and makes Calls meanwhile, concurrently,
// each on an identity of its own.
type stallOp struct {
	Pause time.Duration
	Calls []allowOp
}

func (o stallOp) String() string {
	parts := make([]string, len(o.Calls))
	for i, c := range o.Calls {
		parts[i] = "\n\t\t\t" + c.String() + ","
	}
	return fmt.Sprintf("stallOp{Pause: %s, Calls: []allowOp{%s\n\t\t}}", durString(o.Pause), strings.Join(parts, ""))
}

func (o stallOp) run(h *harness) {
	h.together = true
	defer func() { h.together = false }()
	now := h.clock.freeze()
	defer h.clock.unfreeze()
	if !h.reach() {
		return
	}
	paused := h.env.pause(o.Pause)
	defer sleepUntil(paused)
	type got struct {
		res  slidelimit.Result
		err  error
		a, b time.Time
	}
	results := make([]got, len(o.Calls))
	var wg sync.WaitGroup
	for i, c := range o.Calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := time.Now()
			res, err := h.invoke(context.Background(), c)
			results[i] = got{res, err, a, time.Now()}
		}()
		time.Sleep(time.Millisecond)
	}
	wg.Wait()
	for i, c := range o.Calls {
		g := results[i]
		h.settle(c, g.res, g.err, now, g.a, g.b, fault{stalled: o.Pause})
	}
}

// quiesce is how long after Redis answers a queue of waiters is given to
// hand on or refund what it decided for a waiter that left.
const quiesce = 100 * time.Millisecond

// sleepUntil sleeps until t and a little more, so that a step's pause of
// Redis never reaches into the next step.
func sleepUntil(t time.Time) { time.Sleep(time.Until(t) + 5*time.Millisecond) }

// blockOp blocks an identity's waiters for D.
type blockOp struct {
	Lim int
	Who string
	D   time.Duration
}

func (o blockOp) String() string {
	return fmt.Sprintf("blockOp{Lim: %d, Who: %q, D: %s}", o.Lim, o.Who, durString(o.D))
}

func (o blockOp) run(h *harness) {
	a := time.Now()
	err := h.lims[o.Lim].Block(context.Background(), o.Who, o.D)
	b := time.Now()
	if err != nil {
		if !isUnavailable(err) {
			h.fail(kindDecision, "%s = %v", o, err)
		}
		return
	}
	im := h.identity(o.Who)
	d := min(o.D, slidelimit.MaxBlock).Truncate(time.Millisecond)
	im.block = max(im.block, d)
	if lo := a.Add(d - time.Millisecond); lo.After(im.blockLo) {
		im.blockLo = lo
	}
	if hi := b.Add(d + time.Millisecond); hi.After(im.blockHi) {
		im.blockHi = hi
	}
}

// blockedOp reads an identity's block.
type blockedOp struct {
	Lim int
	Who string
}

func (o blockedOp) String() string { return fmt.Sprintf("blockedOp{Lim: %d, Who: %q}", o.Lim, o.Who) }

func (o blockedOp) run(h *harness) {
	a := time.Now()
	left, err := h.lims[o.Lim].Blocked(context.Background(), o.Who)
	b := time.Now()
	if err != nil {
		if !isUnavailable(err) {
			h.fail(kindDecision, "%s = %v", o, err)
		}
		return
	}
	im := h.identity(o.Who)
	var lo, hi time.Duration
	if !im.blockHi.IsZero() {
		lo = max(0, im.blockLo.Sub(b)-2*time.Millisecond)
		hi = max(0, im.blockHi.Sub(a)+2*time.Millisecond)
	}
	if left < lo || left > hi {
		h.fail(kindDecision, "%s = %v, want %v..%v", o, left, lo, hi)
	}
}

// downOp stops Redis; upOp starts it again, empty.
type downOp struct{}

func (downOp) String() string { return "downOp{}" }

func (downOp) run(h *harness) {
	if h.env.server == nil || !h.up {
		return
	}
	h.env.server.Stop()
	h.up, h.env.down = false, true
}

type upOp struct{}

func (upOp) String() string { return "upOp{}" }

func (upOp) run(h *harness) {
	if h.env.server == nil || h.up {
		return
	}
	now := h.clock.freeze()
	defer h.clock.unfreeze()
	h.env.server.Restart()
	h.env.configure(h.t)
	h.up, h.env.down, h.env.healed = true, false, time.Now()
	// An empty Redis: every identity forgotten, every deny cache stale.
	for who, im := range h.ids {
		im.states, im.lost, im.usedSteps = []*state{newState()}, "", map[int64]bool{}
		for i := range h.lims {
			h.denials.staleFrom(i, who)
		}
	}
	// What the limiters kept lands on the empty Redis.
	if !h.cut {
		h.drain(now)
	}
}

// killOp kills every client connection of Redis.
type killOp struct{}

func (killOp) String() string { return "killOp{}" }

func (killOp) run(h *harness) {
	if !h.up {
		return
	}
	h.env.kill()
	h.env.healed = time.Now()
}

// migrateOp moves the hash slot of Who to another primary of the Cluster,
// key by key, in the background while the sequence goes on: string keys
// first, or sorted sets first.
type migrateOp struct {
	Who          string
	StringsFirst bool
	Pause        time.Duration
}

func (o migrateOp) String() string {
	return fmt.Sprintf("migrateOp{Who: %q, StringsFirst: %v, Pause: %s}", o.Who, o.StringsFirst, durString(o.Pause))
}

func (o migrateOp) run(h *harness) {
	if !h.env.cluster || !h.env.private || h.env.mig != nil && !h.env.mig.done() {
		return
	}
	h.identity(o.Who)
	key, _ := slidelimit.Key(h.prefix, o.Who, slidelimit.PerSecond(1))
	h.migrating = true
	h.env.mig = h.env.migrate(key, o.StringsFirst, o.Pause)
	h.env.mig.who = o.Who
}

// edgeOp moves the test clock to an edge of the call of handle Of, to the
// µs, Delta µs either side: the end of the window of its Limit-th limit
// counted from its decision (What "window"), of its lease (What "lease":
// the Limit-th limit is in flight), or of its RetryAfter (What "retry").
// An edge the clock has passed is skipped.
type edgeOp struct {
	Of    string
	What  string
	Limit int
	Delta int64
}

func (o edgeOp) String() string {
	return fmt.Sprintf("edgeOp{Of: %q, What: %q, Limit: %d, Delta: %d}", o.Of, o.What, o.Limit, o.Delta)
}

func (o edgeOp) run(h *harness) {
	rec := h.calls[o.Of]
	if rec == nil || rec.now == 0 {
		return
	}
	limits := h.limitsOf(rec.call)
	var d time.Duration
	switch {
	case o.What == "retry":
		d = rec.res.RetryAfter
	case o.Limit < len(limits):
		d = limits[o.Limit].Window
	default:
		return
	}
	at := rec.now + d.Microseconds() + o.Delta
	if !h.clock.pin(at, pinMargin) {
		h.t.Logf("     the clock is past t=%dµs: skipped", at)
	}
}

// pinMargin is how far ahead of the clock an edge must lie for edgeOp to
// land on it: the time to the next step's freeze, on a loaded host.
const pinMargin = 20 * time.Millisecond

// knockOp makes the call of handle Of again as a new request without a
// request id, under the same limiter, identity, limits and cost: what a
// client denied does when its RetryAfter is up, which a deny cache may
// answer. If AtRetry, it knocks when Of's RetryAfter ends, Delta µs either
// side (edgeOp's "retry").
type knockOp struct {
	Of      string
	AtRetry bool
	Delta   int64
}

func (o knockOp) String() string {
	return fmt.Sprintf("knockOp{Of: %q, AtRetry: %v, Delta: %d}", o.Of, o.AtRetry, o.Delta)
}

func (o knockOp) run(h *harness) {
	rec := h.calls[o.Of]
	if rec == nil {
		return
	}
	if o.AtRetry {
		edgeOp{Of: o.Of, What: "retry", Delta: o.Delta}.run(h)
	}
	c := rec.call
	c.Req, c.ID = h.nextReq()+".knock", false
	c.run(h)
}

// lostReplyPause is how long Redis is paused under a settle whose reply
// is to be lost.
const lostReplyPause = 300 * time.Millisecond

// lostReplyOp settles the request of Of to To through limiter Via under a
// CLIENT PAUSE longer than Via's timeout, so that the settle fails while
// its script runs once the pause ends (a lost reply), then settles it to
// Then through ThenVia, which must land on Then from either outcome.
type lostReplyOp struct {
	Of      string
	Via, To int
	ThenVia int
	Then    int
}

func (o lostReplyOp) String() string {
	return fmt.Sprintf("lostReplyOp{Of: %q, Via: %d, To: %d, ThenVia: %d, Then: %d}", o.Of, o.Via, o.To, o.ThenVia, o.Then)
}

func (o lostReplyOp) run(h *harness) {
	settleOp{Of: o.Of, Via: o.Via, Kind: "settle", Cost: o.To, Pause: lostReplyPause}.run(h)
	if h.failure == "" {
		settleOp{Of: o.Of, Via: o.ThenVia, Kind: "settle", Cost: o.Then}.run(h)
	}
}

// horizonOp admits N requests with ids under Limit (a stepped limit), one
// after another, then M more Gap later; then, After later, one more, which
// sweeps the ids due; then it retries, refunds or settles (to 0 units:
// Then) the K-th newest of the N and M: those within the horizon are
// found, an older one may be swept (Limiter.Refund: "an older one that
// still counts there is not refunded there, and Refund returns
// ErrPastHorizon").
type horizonOp struct {
	Lim   int
	Who   string
	Limit slidelimit.Limit
	N     int
	Gap   time.Duration
	M     int
	After time.Duration
	Req   string
	K     int
	Then  string
}

func (o horizonOp) String() string {
	return fmt.Sprintf("horizonOp{Lim: %d, Who: %q, Limit: %s, N: %d, Gap: %s, M: %d, After: %s, Req: %q, K: %d, Then: %q}",
		o.Lim, o.Who, limitString(o.Limit), o.N, durString(o.Gap), o.M, durString(o.After), o.Req, o.K, o.Then)
}

func (o horizonOp) run(h *harness) {
	burstOp{Lim: o.Lim, Who: o.Who, Cost: 1, Plan: plan{o.Limit}, N: o.N, Req: o.Req, ID: true}.run(h)
	advanceOp{D: o.Gap}.run(h)
	if o.M > 0 {
		burstOp{Lim: o.Lim, Who: o.Who, Cost: 1, Plan: plan{o.Limit}, N: o.M, Req: o.Req + "+", ID: true}.run(h)
	}
	advanceOp{D: o.After}.run(h)
	allowOp{Lim: o.Lim, Who: o.Who, Cost: 1, Plan: plan{o.Limit}, Req: o.Req + "s", ID: true}.run(h)
	if h.failure != "" || o.K >= o.N+o.M {
		return
	}
	of := fmt.Sprintf("%s+.%d", o.Req, o.M-1-o.K)
	if o.K >= o.M {
		of = fmt.Sprintf("%s.%d", o.Req, o.N+o.M-1-o.K)
	}
	switch o.Then {
	case "retry":
		retryOp{Of: of}.run(h)
	case "refund":
		refundOp{Of: of, Via: o.Lim}.run(h)
	default:
		settleOp{Of: of, Via: o.Lim, Kind: "settle", Cost: 0}.run(h)
	}
}

// stemKey is what every key of identity who starts with: its exact log's
// key (slidelimit.Key) without the exact log's suffix, ":#0".
func stemKey(prefix, who string) string {
	key, _ := slidelimit.Key(prefix, who, slidelimit.PerSecond(1))
	return strings.TrimSuffix(key, ":#0")
}

// holdsOp admits a request with an id under Limit (an in-flight limit),
// moves the clock by a hold and releases it, once per hold, then admits a
// burst of one more than Limit's quota: the in-flight log learns the holds
// ("#h<H>:<D>", inflightHoldEstimate) and the denial answers from them
// (inflightRetry).
type holdsOp struct {
	Lim   int
	Who   string
	Limit slidelimit.Limit
	Holds []time.Duration
	Req   string
}

func (o holdsOp) String() string {
	holds := make([]string, len(o.Holds))
	for i, d := range o.Holds {
		holds[i] = durString(d)
	}
	return fmt.Sprintf("holdsOp{Lim: %d, Who: %q, Limit: %s, Holds: []time.Duration{%s}, Req: %q}",
		o.Lim, o.Who, limitString(o.Limit), strings.Join(holds, ", "), o.Req)
}

func (o holdsOp) run(h *harness) {
	for i, d := range o.Holds {
		req := fmt.Sprintf("%s.%d", o.Req, i)
		allowOp{Lim: o.Lim, Who: o.Who, Cost: 1, Plan: plan{o.Limit}, Req: req, ID: true}.run(h)
		advanceOp{D: d}.run(h)
		settleOp{Of: req, Via: o.Lim, Kind: "release"}.run(h)
		if h.failure != "" {
			return
		}
	}
	burstOp{Lim: o.Lim, Who: o.Who, Cost: 1, Plan: plan{o.Limit}, N: o.Limit.Quota + 1, Req: o.Req + ".b", ID: true}.run(h)
}
