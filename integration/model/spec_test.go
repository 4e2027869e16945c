package model

import (
	"cmp"
	"crypto/sha256"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	slidelimit "github.com/slidelimit/slidelimit/core"
)

// The reference model: what Redis holds for each identity, and what every
// decision, refund and reset does to it, from the documentation of
// Limiter, Limit and AllowLimits and the protocol the scripts' headers
// state, with the narrowings of narrowing_test.go. Times are µs of the
// shared test clock (WithClock); a key's expiry is wall-clock time, for
// Redis expires keys by its own clock.
//
// The model of an identity is a set of concrete states, each one that
// Redis may hold: a call whose command may or may not have run (a
// fallback after it was sent), or a key that may or may not have expired
// by the time a script reached it, each split the set. Every
// answer Redis gives keeps only the states in which the model gives the
// same answer, to the µs; an answer no state gives is a failure.
//
//   - Exact limits count the units admitted into the identity's one exact
//     log in (now-window, now]; every exact limit counts every admission
//     of the identity, whatever limits admitted it, each request one entry
//     of its cost. The log keeps W of history and about its newest Q units,
//     whole instants; a window reaching back to a unit it dropped counts as
//     full (narrowing_test.go).
//   - Stepped limits count whole buckets of their step: the units in
//     buckets b >= floor((now-window)/step). Limits of one step share one
//     log; exact and stepped limits, and stepped limits of different steps,
//     count apart.
//   - A request is admitted when every limit has room, and recorded in
//     every log; a denial, a Peek and a retried id record nothing (but a
//     log's records and what eviction takes).
//   - A retried id is found in any log that holds it, and answered
//     admitted; a refund takes back what the logs still hold of it; Reset
//     forgets the identity's exact log and its limiter's stepped logs.

// xentry is one request in the exact log: its units, at one score.
type xentry struct {
	t    int64  // score: admission time, µs
	id   string // the request id's 8 bytes (a synthetic one when anon)
	req  string // the model's handle, for messages
	anon bool   // a random id: its name is unknown
	cost int    // the units it holds
}

func (e *xentry) units() int { return e.cost }

// xlog is one state of an identity's exact log.
type xlog struct {
	rec     bool  // the record "#r<W>:<Q>:<E>" is there (the log exists)
	w, e    int64 // W (µs) and E (ms, test clock)
	q       int
	hasT    bool // "#t<T>" is there
	t       int64
	entries []*xentry // by score, oldest first; never modified in place
	exp     expiry
}

// slot is one of a stepped log's request ids.
type slot struct {
	id    string
	anon  bool  // id is synthetic: Redis holds a random one
	at    int64 // its score: when it was admitted, µs (test clock), or its bucket's start if later
	units int64
	n     int64 // the units it was admitted for
}

// slog is one state of a stepped log and its ids.
type slog struct {
	step       int64
	exists     bool
	o, n, t, w int64
	due16      int64 // 16 times D, the µs from which an admission sweeps the ids
	e          int64 // ms, test clock
	buckets    map[int64]int64
	ids        []slot // in the order they came
	exp        expiry
}

// expiry is when a key's PEXPIRE ends, in wall-clock time: not before lo,
// not after hi.
type expiry struct{ lo, hi time.Time }

// state is one state of all of an identity's logs.
type state struct {
	x *xlog
	s map[int64]*slog
	f *flog
}

func newState() *state { return &state{x: &xlog{}, s: map[int64]*slog{}, f: &flog{}} }

func (st *state) clone() *state {
	c := &state{x: st.x.clone(), s: make(map[int64]*slog, len(st.s)), f: st.f.clone()}
	for k, g := range st.s {
		c.s[k] = g.clone()
	}
	return c
}

func (x *xlog) clone() *xlog {
	c := *x
	c.entries = slices.Clone(x.entries)
	return &c
}

func (g *slog) clone() *slog {
	c := *g
	c.ids = slices.Clone(g.ids)
	c.buckets = make(map[int64]int64, len(g.buckets))
	for b, v := range g.buckets {
		c.buckets[b] = v
	}
	return &c
}

func (st *state) stepLog(step int64) *slog {
	g := st.s[step]
	if g == nil {
		g = &slog{step: step, buckets: map[int64]int64{}}
		st.s[step] = g
	}
	return g
}

// digest identifies a state, so that branches that came to the same state
// are kept once.
func (st *state) digest() uint64 {
	h := fnv.New64a()
	x := st.x
	fmt.Fprintf(h, "x%v,%d,%d,%d,%v,%d,%d,%d|", x.rec, x.w, x.e, x.q, x.hasT, x.t, x.exp.lo.UnixMicro(), x.exp.hi.UnixMicro())
	for _, e := range x.entries {
		fmt.Fprintf(h, "%d,%x,%v,%d;", e.t, e.id, e.anon, e.cost)
	}
	fmt.Fprintf(h, "f%d,%d|", st.f.exp.lo.UnixMicro(), st.f.exp.hi.UnixMicro())
	for _, l := range st.f.leases {
		fmt.Fprintf(h, "%x,%v,%d;", l.id, l.anon, l.end)
	}
	steps := make([]int64, 0, len(st.s))
	for s := range st.s {
		steps = append(steps, s)
	}
	slices.Sort(steps)
	for _, s := range steps {
		g := st.s[s]
		if !g.exists {
			continue
		}
		fmt.Fprintf(h, "s%d:%d,%d,%d,%d,%d,%d,%d,%d|", s, g.o, g.n, g.t, g.w, g.due16, g.e, g.exp.lo.UnixMicro(), g.exp.hi.UnixMicro())
		for b := g.o; b <= g.n && g.t > 0; b++ {
			fmt.Fprintf(h, "%d,", g.buckets[b])
		}
		for _, sl := range g.ids {
			fmt.Fprintf(h, "%x,%d,%d;", sl.id, sl.at, sl.units)
		}
	}
	return h.Sum64()
}

// idOf is the id ContextWithRequestID records for req: "reduced to 8 bytes
// by SHA-256".
func idOf(req string) string {
	sum := sha256.Sum256([]byte(req))
	return string(sum[:8])
}

// floorDiv is floor(a/b) for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// inWindow reports whether a unit admitted at t counts in a window of w µs
// at now, in a log of step (0: exact).
func inWindow(t, now, w, step int64) bool {
	if step == 0 {
		return t > now-w
	}
	return floorDiv(t, step) >= floorDiv(now-w, step)
}

// call is one request as the model sends it to a state.
type call struct {
	who    string // the identity, or a tenant's
	limits []slidelimit.Limit
	levels []string // per limit, the level of a tenant's tree it counts; nil: the identity itself
	cost   int
	id     string // the id's 8 bytes; "" for a peek
	anon   bool   // id is synthetic: the request's own id is random
	req    string // the model's handle, for messages
	now    int64
	ra, rb time.Time // when Redis may have run it (wall clock)
}

func (c call) peek() bool { return c.id == "" }

// part is the limits of a call that count one log, as Plan groups them.
type part struct {
	step int64
	idx  []int // indexes into call.limits
}

// inflightStep is the step the model gives an identity's in-flight log,
// as the scripts do (script.InFlightStep).
const inflightStep = -1

// stepOf returns the log of its identity that l counts: 0 for the exact
// log, its step in µs for a stepped log, inflightStep for the in-flight
// log.
func stepOf(l slidelimit.Limit) int64 {
	if l.InFlight {
		return inflightStep
	}
	return l.Resolution().Microseconds()
}

// partsOf groups limits by step: the exact log first, then the steps in
// the order the limits name them.
func partsOf(limits []slidelimit.Limit) []part {
	var ps []part
	for i, l := range limits {
		s := stepOf(l)
		j := slices.IndexFunc(ps, func(p part) bool { return p.step == s })
		if j < 0 {
			ps = append(ps, part{step: s})
			j = len(ps) - 1
		}
		ps[j].idx = append(ps[j].idx, i)
	}
	slices.SortStableFunc(ps, func(a, b part) int {
		switch {
		case a.step == 0 && b.step != 0:
			return -1
		case b.step == 0 && a.step != 0:
			return 1
		}
		return 0
	})
	return ps
}

// stat is one limit's answer: units remaining, µs until it admits, µs
// until its window is empty.
type stat struct {
	remaining    int
	retry, reset int64
}

// reply is the model's answer to a call.
type reply struct {
	allowed, dup bool
	st           []stat
	over         []bool // per limit: it alone would deny (a shadow limit's "shadow_denied")
}

func (r reply) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "{allowed %v", r.allowed)
	if r.dup {
		b.WriteString(", a retry")
	}
	for _, s := range r.st {
		fmt.Fprintf(&b, " {%d %v %v}", s.remaining, micro(s.retry), micro(s.reset))
	}
	b.WriteString("}")
	return b.String()
}

// force overrides what a decision finds of the call's id, to tell a
// failure's kind.
type force int

const (
	asIs force = iota
	foundNowhere
	foundSomewhere
)

// branchCap is how many states of one identity the model follows from one
// step to the next, once what Redis holds has narrowed them (observeLogs);
// stepCap, how many within a step. Beyond them the model loses track of
// the identity (see identityModel.lost).
const (
	branchCap = 64
	stepCap   = 4096
)

// expire returns the states st may be in when a script touches the logs
// of steps at a moment between ra and rb: each log that may have expired
// by then splits the states.
func expire(st *state, steps []int64, ra, rb time.Time) []*state {
	out := []*state{st}
	for _, step := range steps {
		var next []*state
		for _, s := range out {
			var exp expiry
			var exists bool
			if step == 0 {
				exp, exists = s.x.exp, s.x.rec || len(s.x.entries) > 0
			} else if step == inflightStep {
				exp, exists = s.f.exp, len(s.f.leases) > 0
			} else if g := s.s[step]; g != nil {
				exp, exists = g.exp, g.exists
			}
			// Redis expires a key once its clock passes the expiry in ms.
			gone := exists && ra.Add(-clockLag).Sub(exp.hi) > expirySlack
			alive := !exists || exp.lo.Sub(rb) > expirySlack
			switch {
			case gone:
				s = s.clone()
				s.drop(step)
				next = append(next, s)
			case alive:
				next = append(next, s)
			default:
				d := s.clone()
				d.drop(step)
				next = append(next, s, d)
			}
		}
		out = next
	}
	return out
}

// expirySlack is how far apart the wall clock and Redis's expiry may be:
// Redis keeps time in ms. clockLag is how far behind the wall clock the
// time may be by which Redis sets, checks and reports expiries: it reads
// its clock once per event loop (and per script), and a loaded host may
// stop it between the reading and the command.
const (
	expirySlack = 3 * time.Millisecond
	clockLag    = 250 * time.Millisecond
)

// expiryOf is the expiry a PEXPIRE of life ms by a script that ran
// between ra and rb sets.
func expiryOf(ra, rb time.Time, life int64) expiry {
	d := time.Duration(life) * time.Millisecond
	return expiry{ra.Add(d - clockLag), rb.Add(d)}
}

// drop forgets the log of step, as if deleted.
func (st *state) drop(step int64) {
	switch step {
	case 0:
		st.x = &xlog{}
		return
	case inflightStep:
		st.f = &flog{}
		return
	}
	delete(st.s, step)
}

// outcome is one way a decision went in one state.
type outcome struct {
	r    reply
	next *state
}

// decide returns the model's answers to c in st, a call whose limits
// all count one identity's logs, with the state each leaves: more than
// one where Redis's own choices are unknown (which units of one instant
// it dropped).
func decide(st *state, c call, f force) []outcome {
	g := group{idx: make([]int, len(c.limits)), c: c, parts: partsOf(c.limits)}
	for i := range g.idx {
		g.idx[i] = i
	}
	var out []outcome
	for _, co := range decideGroups([]group{g}, c, f, [][]*state{{st}}) {
		out = append(out, outcome{r: co.r, next: co.next[0]})
	}
	return out
}

// group is the limits of a call that count one identity's logs (one model
// identity: a level of a tenant's tree, its log of requests): the call as
// those logs see it.
type group struct {
	name  string // the model identity (see logName)
	idx   []int  // indexes into the call's limits
	c     call   // the call with those limits only, and a cost of 1 for a log of requests
	parts []part
}

// logName returns the model identity whose logs limit l of a call by who
// counts, at level (a tenant's tree; "" for the tenant itself): who,
// "/" and the level, and "#req" for a limit that counts requests.
func logName(who, level string, l slidelimit.Limit) string {
	n := who
	if level != "" {
		n += "/" + level
	}
	if l.Requests {
		n += "#req"
	}
	return n
}

// groupsOf splits a call's limits by the identity whose logs they count.
func groupsOf(c call) []group {
	var gs []group
	for i, l := range c.limits {
		lvl := ""
		if c.levels != nil {
			lvl = c.levels[i]
		}
		name := logName(c.who, lvl, l)
		k := slices.IndexFunc(gs, func(g group) bool { return g.name == name })
		if k < 0 {
			gs = append(gs, group{name: name})
			k = len(gs) - 1
		}
		gs[k].idx = append(gs[k].idx, i)
	}
	for k := range gs {
		sub := c
		sub.levels, sub.limits = nil, nil
		for _, i := range gs[k].idx {
			sub.limits = append(sub.limits, c.limits[i])
		}
		if strings.HasSuffix(gs[k].name, "#req") {
			sub.cost = 1 // decide.lua: "a part that counts requests, one each"
		}
		gs[k].c, gs[k].parts = sub, partsOf(sub.limits)
	}
	return gs
}

// combo is one way a decision over several identities' logs went: the
// reply, and each group's state before (from) and after (next).
type combo struct {
	r          reply
	from, next []*state
}

// decideGroups returns the model's answers to c, whose limits count the
// logs of the groups gs, in every combination of the groups' states
// (states[k] for gs[k]): "one atomic decision, so a denial at one level
// never takes quota at another" (AllowTree), and a request admitted only
// when every enforced limit of every part has room.
func decideGroups(gs []group, c call, f force, states [][]*state) []combo {
	cands := make([][]*state, len(gs))
	total := 1
	for k, g := range gs {
		for _, s := range states[k] {
			cands[k] = append(cands[k], expire(s, stepsOfParts(g.parts), c.ra, c.rb)...)
		}
		total *= len(cands[k])
	}
	if total == 0 || total > stepCap {
		return nil
	}
	nparts := 0
	for _, g := range gs {
		nparts += len(g.parts)
	}
	var out []combo
	pick := make([]int, len(gs))
	for {
		out = append(out, decideCombo(gs, c, f, cands, pick, nparts)...)
		k := 0
		for ; k < len(gs); k++ {
			if pick[k]++; pick[k] < len(cands[k]) {
				break
			}
			pick[k] = 0
		}
		if k == len(gs) {
			return out
		}
	}
}

// decideCombo decides c in one combination of the groups' states.
func decideCombo(gs []group, c call, f force, cands [][]*state, pick []int, nparts int) []combo {
	pend := make([]*pending, len(gs))
	from := make([]*state, len(gs))
	fits, dup := true, false
	for k, g := range gs {
		from[k] = cands[k][pick[k]]
		pend[k] = readIn(from[k].clone(), g.c, g.parts)
		fits = fits && pend[k].fits
		dup = dup || pend[k].dup
	}
	switch f {
	case foundNowhere:
		dup = false
	case foundSomewhere:
		dup = !c.peek()
	}
	allowed := fits || dup
	admit := fits && !dup && !c.peek()
	out := []combo{{r: reply{allowed: allowed, dup: dup, st: make([]stat, len(c.limits)), over: make([]bool, len(c.limits))},
		from: from, next: make([]*state, len(gs))}}
	for k, g := range gs {
		var next []combo
		for _, o := range pend[k].finish(admit, allowed, fits && dup, nparts) {
			for _, cb := range out {
				cb.r.st, cb.r.over, cb.next = slices.Clone(cb.r.st), slices.Clone(cb.r.over), slices.Clone(cb.next)
				for m, i := range g.idx {
					cb.r.st[i], cb.r.over[i] = o.r.st[m], o.r.over[m]
				}
				cb.next[k] = o.next
				next = append(next, cb)
			}
		}
		out = next
	}
	return out
}

// stepsOfParts returns the steps of parts.
func stepsOfParts(parts []part) []int64 {
	steps := make([]int64, len(parts))
	for i, p := range parts {
		steps[i] = p.step
	}
	return steps
}

// xread is what reading the exact log found.
type xread struct {
	grow   bool
	w      int64
	q      int
	n      int // units after eviction
	counts []int
}

// sread is what reading a stepped log found.
type sread struct {
	grow   bool
	w      int64
	bucket int64
	new    bool
	counts []int64
}

// pending is a decision of one identity's logs between the reads and the
// writes: what the reads found.
type pending struct {
	st        *state
	c         call
	parts     []part
	counts    []int
	xr        xread
	sr        map[int64]*sread
	fits, dup bool
}

// readIn reads c's parts in st, which it changes (clone it first): each
// log evicts what left the history it keeps and counts its limits.
func readIn(st *state, c call, parts []part) *pending {
	p := &pending{st: st, c: c, parts: parts, counts: make([]int, len(c.limits)), sr: map[int64]*sread{}}
	for _, pt := range parts {
		switch {
		case pt.step == 0:
			p.xr = st.x.read(c, pt)
			for k, i := range pt.idx {
				p.counts[i] = p.xr.counts[k]
			}
		case pt.step > 0:
			r := st.stepLog(pt.step).read(c, pt)
			p.sr[pt.step] = r
			for k, i := range pt.idx {
				p.counts[i] = int(r.counts[k])
			}
		default:
			n := st.f.held(c.now)
			for _, i := range pt.idx {
				p.counts[i] = n
			}
		}
	}
	p.fits = true
	for i, l := range c.limits {
		if !l.Shadow && p.counts[i]+need(c, l) > l.Quota {
			p.fits = false
		}
	}
	if !c.peek() && !c.anon {
		for _, pt := range parts {
			switch {
			case pt.step == 0:
				p.dup = p.dup || st.x.holds(c.id)
			case pt.step > 0:
				p.dup = p.dup || st.stepLog(pt.step).holds(c.id)
			default:
				p.dup = p.dup || st.f.holds(c.id, c.now)
			}
		}
	}
	return p
}

// need is what limit l needs free for c: its cost, or one place in flight.
func need(c call, l slidelimit.Limit) int {
	if l.InFlight {
		return 1
	}
	return c.cost
}

// finish writes what the decision (admit, allowed) writes into the
// pending logs, and returns the answers of its limits. retryFits and
// nparts tell whether the exact part's
// record is written for a retry (recordWrites).
func (p *pending) finish(admit, allowed, retryFits bool, nparts int) []outcome {
	st, c := p.st, p.c
	xs := []*xlog{st.x}
	for _, pt := range p.parts {
		switch {
		case pt.step == 0:
			renew := admit && exactRenews(st.x.e, c.now, p.xr.w)
			writes := recordWrites(c.peek(), admit, retryFits, nparts, p.xr.grow, renew)
			xs = st.x.finish(c, p.xr, admit, writes)
		case pt.step > 0:
			st.stepLog(pt.step).finish(c, p.sr[pt.step], admit)
		default:
			var part []slidelimit.Limit
			for _, i := range pt.idx {
				part = append(part, c.limits[i])
			}
			lease := leaseOf(part).Microseconds()
			if admit {
				st.f.admit(c, lease)
			}
			st.f.evict(c.now)
		}
	}
	var out []outcome
	for k, x := range xs {
		next := st
		if k > 0 {
			next = st.clone()
			x = x.clone()
		}
		out = append(out, outcomeOf(next, x, c, p.parts, p.counts, admit, allowed, p.dup))
	}
	return out
}

// outcomeOf is the answer to c in next, whose exact log is x.
func outcomeOf(next *state, x *xlog, c call, parts []part, counts []int, admit, allowed, dup bool) outcome {
	next.x = x
	r := reply{allowed: allowed, dup: dup, st: make([]stat, len(c.limits)), over: make([]bool, len(c.limits))}
	for _, p := range parts {
		for _, i := range p.idx {
			l := c.limits[i]
			r.over[i] = counts[i]+need(c, l) > l.Quota
			switch {
			case p.step == 0:
				r.st[i] = x.stat(c, l, counts[i], admit, allowed)
			case p.step > 0:
				r.st[i] = next.s[p.step].stat(c, l, int64(counts[i]), admit, allowed)
			default:
				var part []slidelimit.Limit
				for _, k := range p.idx {
					part = append(part, c.limits[k])
				}
				r.st[i] = next.f.stat(c, l, leaseOf(part).Microseconds(), admit, allowed)
			}
		}
	}
	return outcome{r: r, next: next}
}

// read evicts what left the history the exact log keeps (exactHistory),
// forgets a drop that left it, and counts the part's limits.
func (x *xlog) read(c call, p part) xread {
	r := xread{w: x.w, q: x.q}
	if !x.rec {
		r.w, r.q = 0, 0
	}
	for _, i := range p.idx {
		l := c.limits[i]
		if w := exactHistory(r.w, l.Window.Microseconds()); w > r.w {
			r.grow, r.w = true, w
		}
		if q := exactKeeps(r.q, l.Quota); q > r.q {
			r.grow, r.q = true, q
		}
	}
	x.entries = slices.DeleteFunc(slices.Clone(x.entries), func(e *xentry) bool { return e.t <= c.now-r.w })
	if x.hasT && x.t <= c.now-r.w {
		x.hasT = false
	}
	for _, e := range x.entries {
		r.n += e.units()
	}
	for _, i := range p.idx {
		l := c.limits[i]
		w := l.Window.Microseconds()
		n := x.count(c.now, w)
		if exactFull(x.t, x.hasT, c.now, w) {
			n = max(n, l.Quota)
		}
		r.counts = append(r.counts, n)
	}
	return r
}

// count is the units the exact log holds in a window of w at now.
func (x *xlog) count(now, w int64) int {
	n := 0
	for _, e := range x.entries {
		if e.t > now-w {
			n += e.units()
		}
	}
	return n
}

// holds reports whether a retry of id finds it in the exact log: its
// member is there, whatever its cost.
func (x *xlog) holds(id string) bool {
	return slices.ContainsFunc(x.entries, func(e *xentry) bool { return e.id == id && !e.anon })
}

// finish records an admission, writes the record if writes, and keeps
// about the newest Q units (exactKeeps). It returns one log: what the log
// keeps does not hang on names the model may not know.
func (x *xlog) finish(c call, r xread, admit, writes bool) []*xlog {
	hadRec := x.rec
	added := 0
	if admit {
		e := &xentry{t: c.now, id: c.id, req: c.req, anon: c.anon, cost: c.cost}
		added = e.units()
		i := len(x.entries)
		for i > 0 && x.entries[i-1].t > e.t {
			i--
		}
		x.entries = slices.Insert(slices.Clone(x.entries), i, e)
	}
	if writes {
		life := exactLife(r.w)
		x.rec, x.w, x.q, x.e = true, r.w, r.q, c.now/1000+life
		x.exp = expiryOf(c.ra, c.rb, life)
	}
	if !c.peek() && hadRec && r.n+added > r.q {
		x.keep(r.n+added, r.q)
	}
	return []*xlog{x}
}

// keep drops the oldest instants of the log, which holds n units, while
// it keeps at least q without them (exactKeeps), and notes the newest one
// dropped as T.
func (x *xlog) keep(n, q int) {
	for len(x.entries) > 0 {
		t := x.entries[0].t
		end, units := 0, 0
		for end < len(x.entries) && x.entries[end].t == t {
			units += x.entries[end].units()
			end++
		}
		if n-units < q {
			return
		}
		x.entries = slices.Delete(slices.Clone(x.entries), 0, end)
		n -= units
		x.hasT, x.t = true, t
	}
}

// stat is an exact limit's answer, from its count c before the decision.
func (x *xlog) stat(c call, l slidelimit.Limit, n int, admit, allowed bool) stat {
	w, q := l.Window.Microseconds(), l.Quota
	var s stat
	over := n+c.cost > q // this limit alone would deny
	if admit {
		n += c.cost
	}
	if over && (l.Shadow || !allowed) {
		s.retry = x.retryAfter(c.now, w, q, c.cost)
	}
	if n > 0 {
		newest := int64(-1) // the records' score, if no unit is left
		for _, e := range x.entries {
			newest = max(newest, e.t)
		}
		s.reset = newest + w - c.now
		if x.hasT {
			s.reset = max(s.reset, x.t+w-c.now)
		}
		s.reset = max(s.reset, 0)
	}
	s.remaining = q - min(n, q)
	return s
}

// retryAfter is how long until a limit of window w and quota q alone
// admits cost units, if nothing changes meanwhile: once the window no
// longer reaches back to T, and once enough of its units have left.
func (x *xlog) retryAfter(now, w int64, q, cost int) int64 {
	var d int64
	if exactFull(x.t, x.hasT, now, w) {
		d = x.t + w - now
	}
	var ts []int64
	for _, e := range x.entries {
		if e.t > now-w {
			for range e.units() {
				ts = append(ts, e.t)
			}
		}
	}
	if k := q - cost + 1; len(ts) >= k {
		slices.Sort(ts)
		d = max(d, ts[len(ts)-k]+w-now)
	}
	return d
}

// read evicts the buckets older than the history the stepped log keeps,
// and counts the part's limits.
func (g *slog) read(c call, p part) *sread {
	r := &sread{w: g.w, new: !g.exists}
	if !g.exists {
		*g = slog{step: g.step, buckets: map[int64]int64{}}
		r.w = 0
	}
	for _, i := range p.idx {
		if w := c.limits[i].Window.Microseconds(); w > r.w {
			r.grow, r.w = true, w
		}
	}
	first := floorDiv(c.now-r.w, g.step)
	if g.t > 0 && g.o < first {
		if g.n < first {
			g.buckets, g.t = map[int64]int64{}, 0
		} else {
			for b := g.o; b < first; b++ {
				g.t -= g.buckets[b]
				delete(g.buckets, b)
			}
			g.o = first
		}
		g.w = r.w // stepped (stepped.lua) writes the header with the history it counted
	}
	r.bucket = floorDiv(c.now, g.step)
	if g.t > 0 {
		r.bucket = steppedBucket(c.now, g.step, g.n)
	}
	for _, i := range p.idx {
		r.counts = append(r.counts, g.count(c.now, c.limits[i].Window.Microseconds()))
	}
	return r
}

// count is the units the stepped log holds in a window of w at now.
func (g *slog) count(now, w int64) int64 {
	var n int64
	from := floorDiv(now-w, g.step)
	for b, v := range g.buckets {
		if b >= from {
			n += v
		}
	}
	return n
}

// holds reports whether id is among the stepped log's request ids.
func (g *slog) holds(id string) bool {
	return g.exists && slices.ContainsFunc(g.ids, func(s slot) bool { return s.id == id && !s.anon })
}

// finish records an admission in its bucket, and writes the header and the
// log's life when due.
func (g *slog) finish(c call, r *sread, admit bool) {
	if !admit && (c.peek() || !r.grow || r.new) {
		return
	}
	if admit {
		hz := steppedIDHorizon(r.w)
		if r.new {
			// "Nothing in its ids is due before the horizon and its
			// sixteenth."
			g.due16 = 16*c.now + 17*hz
		}
		g.exists = true
		g.buckets[r.bucket] += int64(c.cost)
		if g.t == 0 {
			g.o, g.n = r.bucket, r.bucket
		} else if r.bucket > g.n {
			g.n = r.bucket
		}
		g.t += int64(c.cost)
		g.ids = append(g.ids, slot{id: c.id, anon: c.anon, at: max(c.now, r.bucket*g.step), units: int64(c.cost), n: int64(c.cost)})
		if 16*c.now >= g.due16 && g.sweep(c.now-hz) {
			g.due16 = 16*c.now + hz
		}
	}
	g.w = r.w
	if r.grow || steppedRenews(g.e, c.now, r.w, g.step) {
		g.lives(c, steppedLife(r.w, g.step))
	}
}

// sweep drops the oldest ids admitted at cut or before: steppedSweep of
// them and the rest of the last one's instant ("SWEEP of them, and the
// rest of the instant (score) of the last"). It reports whether it dropped
// every id due (fewer than steppedSweep were).
func (g *slog) sweep(cut int64) bool {
	var due []int64
	for _, s := range g.ids {
		if s.at <= cut {
			due = append(due, s.at)
		}
	}
	slices.Sort(due)
	if len(due) < steppedSweep {
		g.ids = slices.DeleteFunc(g.ids, func(s slot) bool { return s.at <= cut })
		return true
	}
	last := due[steppedSweep-1]
	g.ids = slices.DeleteFunc(g.ids, func(s slot) bool { return s.at <= last })
	return false
}

// lives renews g for life ms from c's write.
func (g *slog) lives(c call, life int64) {
	g.e = c.now/1000 + life
	g.exp = expiryOf(c.ra, c.rb, life)
}

// stat is a stepped limit's answer, from its count n before the decision.
func (g *slog) stat(c call, l slidelimit.Limit, n int64, admit, allowed bool) stat {
	w, q := l.Window.Microseconds(), int64(l.Quota)
	var s stat
	over := n+int64(c.cost) > q // this limit alone would deny
	if admit {
		n += int64(c.cost)
	}
	if over && (l.Shadow || !allowed) {
		// A bucket leaves the window whole, a step after its start.
		k := n + int64(c.cost) - q
		for b := max(floorDiv(c.now-w, g.step), g.o); b <= g.n; b++ {
			if k -= g.buckets[b]; k <= 0 {
				s.retry = (b+1)*g.step + w - c.now
				break
			}
		}
	}
	if n > 0 {
		// Until the newest bucket admitted to leaves: the header's n, which
		// a refund does not move.
		s.reset = max((g.n+1)*g.step+w-c.now, 0)
	}
	s.remaining = int(q - min(n, q))
	return s
}

// settleAct is what one settle script call (settle.lua) does to a
// request's logs: its units from old to units (below 0: left as they
// are), its leases in flight (kept, released, or renewed to end at
// renewTo), and its units moved later by shift µs.
type settleAct struct {
	id      string
	at      int64 // µs, test clock: when the request was admitted
	lo, old int   // the units the client holds it at: old, or lo to old after a settle that may have run
	units   int
	lease   leaseAct
	now     int64 // µs, test clock: a renewal's or a shift's now
	renewTo int64
	shift   int64
	// ra and rb bound, on the wall clock, when the settle script ran: a
	// renewal makes the log live a lease from then (settle.lua: PEXPIRE
	// to the lease's ms and one more, unless it lives longer already).
	ra, rb time.Time
}

type leaseAct int

const (
	leaseKeep leaseAct = iota
	leaseRelease
	leaseRenew
)

// refundAct is a refund of id admitted at cost: Settle(ctx, r, 0), at now.
func refundAct(id string, cost int, now int64) settleAct {
	return settleAct{id: id, lo: cost, old: cost, units: 0, lease: leaseRelease, now: now}
}

// settle applies a to the logs of steps, and returns the states it
// leaves and how many of the request's leases were held before.
// settle.lua: an exact log changes a request it holds, whatever it holds it
// at, "a settle to fewer units gives the rest back; to more, it records
// the excess at the admission's time" and keeps about the newest Q units;
// a stepped log one among its last ids, by the units its entry
// holds; a log of requests (the caller passes old 1, and units 0 or -1)
// only a refund.
func (st *state) settle(a settleAct, steps []int64) ([]*state, int) {
	leases := 0
	xs := []*xlog{st.x}
	for _, step := range steps {
		switch {
		case step == 0 && a.units >= 0:
			xs = st.x.settle(a.id, a.units)
		case step > 0 && a.units >= 0:
			if g := st.s[step]; g != nil && g.exists {
				g.settle(a.id, a.units)
			}
		case step == 0 && a.shift > 0:
			xs = []*xlog{st.x.shift(a)}
		case step > 0 && a.shift > 0:
			if g := st.s[step]; g != nil && g.exists {
				g.shift(a)
			}
		case step == inflightStep:
			leases += st.f.settle(a)
		}
	}
	out := []*state{st}
	st.x = xs[0]
	for _, x := range xs[1:] {
		c := st.clone()
		c.x = x
		out = append(out, c)
	}
	return out, leases
}

// settle moves the request of id to units, if the log holds it,
// whatever it holds it at ("a settle lands on the cost it names"): a
// settle to 0 forgets it; one to more keeps about the newest Q.
func (x *xlog) settle(id string, units int) []*xlog {
	i := slices.IndexFunc(x.entries, func(e *xentry) bool { return e.id == id && !e.anon })
	if i < 0 || x.entries[i].cost == units {
		return []*xlog{x}
	}
	had := x.entries[i].cost
	x.entries = slices.Clone(x.entries)
	if units == 0 {
		x.entries = slices.Delete(x.entries, i, i+1)
	} else {
		e := *x.entries[i]
		e.cost = units
		x.entries[i] = &e
	}
	n := 0
	for _, e := range x.entries {
		n += e.units()
	}
	if units > had && x.rec && n > x.q {
		x.keep(n, x.q)
	}
	return []*xlog{x}
}

// shift moves the units of the request of a.id later by a.shift µs, if
// the log holds its own member (settle.lua): each unit's score, and the
// log lives until the latest of them leaves the history it keeps, unless
// it lives longer already.
func (x *xlog) shift(a settleAct) *xlog {
	i := slices.IndexFunc(x.entries, func(e *xentry) bool { return e.id == a.id && !e.anon })
	if i < 0 || x.entries[i].cost <= 0 {
		return x
	}
	c := x.clone()
	e := *c.entries[i]
	e.t += a.shift
	c.entries[i] = &e
	slices.SortStableFunc(c.entries, func(p, q *xentry) int { return cmp.Compare(p.t, q.t) })
	if c.rec {
		c.exp = c.exp.extended(expiryOf(a.ra, a.rb, ceilDiv(e.t+c.w-a.now, 1000)))
	}
	return c
}

// shift moves the units of the request of a.id, if it is among the ids
// kept and its bucket b in o..n, later by a.shift µs in whole steps,
// rounded up, to no later than the step after now's (settle.lua): the
// units its entry holds, as far as b counts them, go to that bucket, the
// newest if it is past n, and the log lives until that bucket leaves the
// history it keeps, unless it lives longer already.
func (g *slog) shift(a settleAct) {
	i := slices.IndexFunc(g.ids, func(s slot) bool { return s.id == a.id && !s.anon })
	if i < 0 {
		return
	}
	sl := g.ids[i]
	b := floorDiv(sl.at, g.step)
	if sl.units <= 0 || g.t <= 0 || b < g.o || b > g.n {
		return
	}
	d := min(b+ceilDiv(a.shift, g.step), floorDiv(a.now, g.step)+1)
	moved := min(g.buckets[b], sl.units)
	if d <= b || moved <= 0 {
		return
	}
	g.buckets[b] -= moved
	g.buckets[d] += moved
	g.n = max(g.n, d)
	g.ids[i].at = d * g.step
	g.exp = g.exp.extended(expiryOf(a.ra, a.rb, ceilDiv((d+1)*g.step+g.w-a.now, 1000)))
}

// extended is e after a PEXPIRE to a life of f unless the key lived
// longer: no sooner than either's lo, no later than either's hi.
func (e expiry) extended(f expiry) expiry {
	if f.lo.After(e.lo) {
		e.lo = f.lo
	}
	if f.hi.After(e.hi) {
		e.hi = f.hi
	}
	return e
}

// settle moves the units of the request of id, if it is among the ids
// kept, to units: its bucket by the difference (but never below 0); a
// settle to 0 forgets the id.
func (g *slog) settle(id string, units int) {
	i := slices.IndexFunc(g.ids, func(s slot) bool { return s.id == id && !s.anon })
	if i < 0 {
		return
	}
	sl := g.ids[i]
	b := floorDiv(sl.at, g.step)
	if d := int64(units) - sl.units; d != 0 && g.t > 0 && b >= g.o && b <= g.n {
		if d < 0 {
			d = -min(g.buckets[b], -d)
		}
		g.buckets[b] += d
		g.t += d
	}
	if units == 0 {
		g.ids = slices.Delete(g.ids, i, i+1)
	} else {
		g.ids[i].units = int64(units)
	}
}

// lease is one request's place in flight: until end (µs, test clock).
type lease struct {
	id   string
	anon bool
	req  string
	end  int64
	d    int64 // the lease it took, µs
}

// flog is one state of an identity's in-flight log (inflight.lua): "a
// sorted set of request ids, each scored with the µs at which its lease
// ends", which "lives as long as its longest lease".
type flog struct {
	leases []lease // in the order taken
	exp    expiry
	// est: the log holds its estimate of a hold, "#h<H>:<D>": H and D (µs)
	// as inflight.lua moves them at each release of a lease still held.
	est     bool
	hold, d int64
}

func (f *flog) clone() *flog {
	c := *f
	c.leases = slices.Clone(f.leases)
	return &c
}

// held returns how many leases are held at now: those that end after it.
func (f *flog) held(now int64) int {
	n := 0
	for _, l := range f.leases {
		if l.end > now {
			n++
		}
	}
	return n
}

// evict drops the leases that ended by now once a lease is held: a
// decision never empties the log (inflight.lua), so a log of ended leases
// only lives on until it expires.
func (f *flog) evict(now int64) {
	if f.held(now) > 0 {
		f.leases = slices.DeleteFunc(slices.Clone(f.leases), func(l lease) bool { return l.end <= now })
	}
}

// holds reports whether id holds a lease at now.
func (f *flog) holds(id string, now int64) bool {
	return slices.ContainsFunc(f.leases, func(l lease) bool { return l.id == id && !l.anon && l.end > now })
}

// admit takes a lease for c, of d µs: "the longest Window of its enforced
// in-flight limits (of its shadow ones if it has none)" (leaseOf). The log lives as long as its longest lease: a lease no
// longer than one held leaves the log's life as it was.
func (f *flog) admit(c call, d int64) {
	f.leases = append(slices.Clone(f.leases), lease{id: c.id, anon: c.anon, req: c.req, end: c.now + d, d: d})
	f.lives(expiryOf(c.ra, c.rb, inflightLife(d)))
}

// lives makes f live at least until e.
func (f *flog) lives(e expiry) { f.exp = f.exp.extended(e) }

// settle releases or renews the lease of a.id, and reports whether it
// held one: Limiter.Renew, "a lease that ended already is not renewed
// ... and the request holds no place".
func (f *flog) settle(a settleAct) int {
	i := slices.IndexFunc(f.leases, func(l lease) bool { return l.id == a.id && !l.anon })
	if i < 0 || a.lease == leaseKeep {
		return 0
	}
	f.leases = slices.Clone(f.leases)
	switch {
	case a.lease == leaseRelease:
		if l := f.leases[i]; l.end > a.now {
			f.held1(min(max(a.now-(l.end-l.d), 0), l.d))
		}
		f.leases = slices.Delete(f.leases, i, i+1)
		f.emptied()
		return 1
	case f.leases[i].end <= a.now:
		f.leases = slices.Delete(f.leases, i, i+1)
		f.emptied()
		return 0
	}
	f.leases[i].end = a.renewTo
	f.lives(expiryOf(a.ra, a.rb, inflightLife(a.renewTo-a.now)))
	return 1
}

// held1 moves the estimate of a hold by a release's hold of h µs
// (inflightHoldEstimate).
func (f *flog) held1(h int64) {
	f.hold, f.d, f.est = inflightHoldEstimate(f.est, f.hold, f.d, h)
}

// emptied forgets the life of a log left with no lease and no estimate:
// Redis deleted it.
func (f *flog) emptied() {
	if len(f.leases) == 0 && !f.est {
		f.exp = expiry{}
	}
}

// stat is an in-flight limit's answer after the decision: places left,
// µs until the first lease ends if it alone denies, µs until the last
// ends.
func (f *flog) stat(c call, l slidelimit.Limit, lease int64, admit, allowed bool) stat {
	n := f.held(c.now) // with a lease held, every lease that ended is gone
	held := n
	if admit {
		held--
	}
	s := stat{remaining: max(l.Quota-n, 0)}
	if held+1 > l.Quota && (l.Shadow || !allowed) {
		first := int64(-1)
		for _, x := range f.leases {
			if x.end > c.now && (first < 0 || x.end < first) {
				first = x.end
			}
		}
		s.retry = max(first-c.now, 0)
		if f.est {
			s.retry = inflightRetry(s.retry, first-lease+f.hold-c.now, f.hold, f.d, int64(l.Quota))
		}
	}
	if n > 0 {
		last := f.leases[0].end
		for _, x := range f.leases {
			last = max(last, x.end)
		}
		s.reset = max(last-c.now, 0)
	}
	return s
}

// reset deletes the exact log and the stepped logs of steps.
func (st *state) reset(steps []int64) {
	st.x = &xlog{}
	for _, s := range steps {
		delete(st.s, s)
	}
}

// describe writes what st holds that the limits count, for a failure's
// message.
func (st *state) describe(c call) string {
	var parts []string
	for _, p := range partsOf(c.limits) {
		if p.step == 0 {
			x := st.x
			var b strings.Builder
			fmt.Fprintf(&b, "exact log: W %v, Q %d", micro(x.w), x.q)
			if !x.rec {
				b.WriteString(" (no record)")
			}
			if x.hasT {
				fmt.Fprintf(&b, ", T now%+v", micro(x.t-c.now))
			}
			fmt.Fprintf(&b, ", %d units:", x.count(c.now, 1<<62))
			for i, e := range x.entries {
				if i == 12 {
					fmt.Fprintf(&b, " … %d more", len(x.entries)-i)
					break
				}
				fmt.Fprintf(&b, " %s×%d@now%+v", cmp.Or(e.req, "?"), e.units(), micro(e.t-c.now))
			}
			parts = append(parts, b.String())
			continue
		}
		g := st.s[p.step]
		if g == nil || !g.exists {
			parts = append(parts, fmt.Sprintf("stepped log of %v: none", micro(p.step)))
			continue
		}
		parts = append(parts, fmt.Sprintf("stepped log of %v: W %v, buckets %d..%d (now is %d) holding %d units, %d ids recorded",
			micro(p.step), micro(g.w), g.o, g.n, floorDiv(c.now, p.step), g.t, len(g.ids)))
	}
	return strings.Join(parts, "; ")
}

// identityModel is what the model holds of one identity: the states Redis
// may be in, and what the bounds on its keys need.
type identityModel struct {
	states []*state
	// lost says why the model stopped following the identity ("" while it
	// follows it): too many states at once. Its decisions go unjudged
	// until a restart or a Reset forgets every log it used.
	lost      string
	usedSteps map[int64]bool // steps used since the model lost track
	most      int            // the most states it held at once

	maxExact       int                     // the largest exact quota ever used on it
	longestExact   time.Duration           // the longest exact window ever used on it
	longestAt      map[int64]time.Duration // per step (µs): the longest window counted at it
	maxInFlight    int                     // the largest enforced in-flight quota used on it
	shadowInFlight bool                    // a shadow in-flight limit, which holds no bound, was used on it
	longestLease   time.Duration           // the longest lease taken on it
	block          time.Duration           // the longest Block given it
	blockLo        time.Time               // the block ends no sooner than this (wall clock)
	blockHi        time.Time               // and no later than this
}

func newIdentity() *identityModel {
	return &identityModel{states: []*state{newState()}, longestAt: map[int64]time.Duration{}, usedSteps: map[int64]bool{}}
}

// use notes limits used on the identity, for the bounds on its keys.
func (im *identityModel) use(limits []slidelimit.Limit) {
	for _, l := range limits {
		s := stepOf(l)
		switch {
		case s == 0:
			im.maxExact = max(im.maxExact, l.Quota)
			im.longestExact = max(im.longestExact, l.Window)
		case s == inflightStep && l.Shadow:
			im.shadowInFlight = true
			im.longestLease = max(im.longestLease, l.Window)
		case s == inflightStep:
			im.maxInFlight = max(im.maxInFlight, l.Quota)
			im.longestLease = max(im.longestLease, l.Window)
		default:
			im.longestAt[s] = max(im.longestAt[s], l.Window)
		}
		im.usedSteps[s] = true
	}
}

// settle replaces the states with next, each kept once, or loses track of
// the identity when they are too many.
func (im *identityModel) settle(next []*state) {
	seen := map[uint64]bool{}
	var kept []*state
	for _, s := range next {
		d := s.digest()
		if !seen[d] {
			seen[d] = true
			kept = append(kept, s)
		}
	}
	if len(kept) > stepCap {
		im.lose(fmt.Sprintf("%d states within a step", len(kept)))
		return
	}
	im.states = kept
	im.most = max(im.most, len(kept))
}

func (im *identityModel) lose(why string) {
	im.lost, im.states = why, nil
	im.usedSteps = map[int64]bool{0: true}
}

// each replaces every state with the states fn returns for it.
func (im *identityModel) each(fn func(*state) []*state) {
	if im.lost != "" {
		return
	}
	var next []*state
	for _, s := range im.states {
		next = append(next, fn(s)...)
	}
	im.settle(next)
}

// maybe keeps every state, and adds what fn makes of a copy of it: an
// operation that may or may not have run.
func (im *identityModel) maybe(fn func(*state) []*state) {
	im.each(func(s *state) []*state { return append([]*state{s}, fn(s.clone())...) })
}

// run returns the states a decision of c leaves in s, whatever it answered.
func run(s *state, c call) []*state {
	var out []*state
	for _, o := range decide(s, c, asIs) {
		out = append(out, o.next)
	}
	return out
}

// admitThenRefund returns the states that c, admitted (where it would be)
// and then refunded, leaves in s: what a Wait does with an admission it
// hands to no one. The refund goes by the admission's own id, which the
// queue knows: so the model does too, though the caller never saw it (an
// anonymous entry, whose members the model does not know, no refund could
// find).
func admitThenRefund(s *state, c call) []*state {
	c.anon = false
	var out []*state
	for _, o := range decide(s, c, asIs) {
		if !o.r.allowed || o.r.dup {
			out = append(out, o.next)
			continue
		}
		next, _ := o.next.settle(refundAct(c.id, c.cost, c.now), stepsOf(c.limits))
		out = append(out, next...)
	}
	return out
}

// stepsOf returns the steps of the logs limits count, as Plan orders them.
func stepsOf(limits []slidelimit.Limit) []int64 {
	var steps []int64
	for _, p := range partsOf(limits) {
		steps = append(steps, p.step)
	}
	return steps
}

// matches reports whether Redis's answer res (shadow mode undone) is r.
func (r reply) matches(res slidelimit.Result) bool {
	if res.Allowed != r.allowed || len(res.Statuses) != len(r.st) {
		return false
	}
	for i, s := range res.Statuses {
		want := r.st[i]
		if s.Remaining != want.remaining || s.RetryAfter.Microseconds() != want.retry || s.ResetAfter.Microseconds() != want.reset {
			return false
		}
	}
	return true
}

// deciderConsistent checks the Result's own fields against its Statuses:
// "on a denial, the denying limit that takes longest to admit the request;
// otherwise the limit with the fewest units left".
func deciderConsistent(res slidelimit.Result) string {
	if len(res.Statuses) == 0 {
		return "no statuses"
	}
	// The decider is an enforced limit, never a shadow one (but when all are).
	k := 0
	for i, s := range res.Statuses {
		d := res.Statuses[k]
		switch {
		case s.Limit.Shadow:
		case d.Limit.Shadow:
			k = i
		case res.Allowed && !res.Shadow && s.Remaining < d.Remaining || (!res.Allowed || res.Shadow) && s.RetryAfter > d.RetryAfter:
			k = i
		}
	}
	d := res.Statuses[k]
	if res.Limit != d.Limit || res.Remaining != d.Remaining || res.RetryAfter != d.RetryAfter || res.ResetAfter != d.ResetAfter {
		return fmt.Sprintf("the Result's own fields (%v, remaining %d, retry %v, reset %v) are not those of its deciding status %d (%+v)",
			res.Limit, res.Remaining, res.RetryAfter, res.ResetAfter, k, d)
	}
	return ""
}

func micro(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

// localModel is FailLocal's log in one limiter: per model identity (a
// level of a tenant's tree, its log of requests; see logName), the
// admissions it made itself while Redis could not decide, and the places
// in flight it gave, timed by the wall clock (FailLocal ignores
// WithClock).
type localModel struct {
	replicas int
	logs     map[string][]localEntry
	leases   map[string][]localLease
	windows  map[string]*localWindows // per level's identity (a log's name less "#req")
}

// localWindows is what windows FailLocal's decisions counted on one
// level's identity: those every decision counted, and the longest any did.
// FailLocal keeps a log per window, coalescing admissions at a 64th of it
// and stamping them with the latest, so a limit counts an admission up to
// a 64th of its window longer than it was made; a log of a window not
// counted from the first decision on starts from the log of another window
// as long or longer, at that log's coarser resolution (narrowing_test.go).
//
// Like a Redis log, which keeps the history of the longest window counted
// in it, FailLocal's logs keep only what some log's window held: a window
// longer than any counted on the identity lately starts from the longest
// log, so it holds none of what that log let go ("a window not counted on
// the identity before starts from the log of the shortest window at least
// as long, or else of the longest"). open mirrors which logs the identity
// has, most recently counted first, and since when each holds every
// admission.
type localWindows struct {
	always  []time.Duration
	longest time.Duration
	logs    []localWindowLog // at most localWindowLogs, most recently counted first
}

// localWindowLog is a log FailLocal keeps for a window of one identity:
// it holds every admission FailLocal made on the identity after since.
type localWindowLog struct {
	window time.Duration
	since  time.Time
}

// localWindowLogs is how many windows FailLocal keeps a log of per
// identity, the most recently counted (core's localWindows).
const localWindowLogs = 8

// open mirrors a FailLocal decision's counting a window of the identity
// at b, the latest it may have been made: a log counted before is the
// most recently counted again; a new one starts with the admissions of
// the log of the shortest window at least as long, or else of the
// longest, of which it holds every one made after that log's since and
// within that log's window of b (the source evicted at its last decision,
// no later than b).
func (w *localWindows) open(window time.Duration, b time.Time) {
	for i, lg := range w.logs {
		if lg.window == window {
			copy(w.logs[1:i+1], w.logs[:i])
			w.logs[0] = lg
			return
		}
	}
	var from *localWindowLog
	for i := range w.logs {
		o := &w.logs[i]
		switch {
		case o.window >= window:
			if from == nil || from.window < window || o.window < from.window {
				from = o
			}
		case from == nil || from.window < window && o.window > from.window:
			from = o
		}
	}
	lg := localWindowLog{window: window}
	if from != nil {
		lg.since = from.since
		if from.window < window {
			if t := b.Add(-from.window); t.After(lg.since) {
				lg.since = t
			}
		}
	}
	w.logs = slices.Insert(w.logs, 0, lg)
	if len(w.logs) > localWindowLogs {
		w.logs = w.logs[:localWindowLogs]
	}
}

// heldSince returns since when the identity's log of window holds every
// admission FailLocal made on it (open first).
func (w *localWindows) heldSince(window time.Duration) time.Time {
	for _, lg := range w.logs {
		if lg.window == window {
			return lg.since
		}
	}
	return time.Time{}
}

// note records that a FailLocal decision on the identity behind name
// counted the windows of limits.
func (lm *localModel) note(name string, limits []slidelimit.Limit) {
	var ws []time.Duration
	for _, l := range limits {
		if !l.InFlight {
			ws = append(ws, l.Window)
		}
	}
	key := strings.TrimSuffix(name, "#req")
	if lm.windows == nil {
		lm.windows = map[string]*localWindows{}
	}
	w := lm.windows[key]
	if w == nil {
		w = &localWindows{always: ws}
		lm.windows[key] = w
	}
	w.always = slices.DeleteFunc(w.always, func(x time.Duration) bool { return !slices.Contains(ws, x) })
	for _, x := range ws {
		w.longest = max(w.longest, x)
	}
}

// slack is how much longer than its window a limit of window may count an
// admission FailLocal made on the identity behind name.
func (lm *localModel) slack(name string, window time.Duration) time.Duration {
	w := lm.windows[strings.TrimSuffix(name, "#req")]
	if w == nil || slices.Contains(w.always, window) {
		return window / localLogSlots
	}
	return max(window, w.longest) / localLogSlots
}

type localEntry struct {
	lo, hi time.Time
	units  int
	maybe  bool // an admission FailLocal may have kept: it counts toward hi only
}

// localLease is a place in flight FailLocal gave the request of handle
// req: it ends between lo and hi.
type localLease struct {
	req    string
	lo, hi time.Time
}

func rangeString(lo, hi int) string {
	if lo == hi {
		return fmt.Sprint(lo)
	}
	return fmt.Sprintf("%d..%d", lo, hi)
}

// localName is the local log limit i of cl counts: FailLocal keeps one
// per level of a tenant's tree, and counts requests apart ("A limit
// marked ForRequests counts requests rather than their cost").
func localName(cl call, i int) string {
	lvl := ""
	if cl.levels != nil {
		lvl = cl.levels[i]
	}
	return logName(cl.who, lvl, cl.limits[i])
}

// judge checks a FailLocal decision of cl (made between cl.ra and cl.rb)
// against this process's share of each of the call's limits.
func (lm *localModel) judge(res slidelimit.Result, cl call, peek bool) string {
	if !slices.Contains(cl.limits, res.Limit) {
		return fmt.Sprintf("a FailLocal decision of limit %v, want one of the call's limits %v", res.Limit, cl.limits)
	}
	a, b := cl.ra, cl.rb
	canAdmit, canDeny := true, false
	var detail []string
	for i := range cl.limits {
		lm.note(localName(cl, i), cl.limits)
	}
	// The logs the decision counted, in its order (core's decide).
	for i, l := range cl.limits {
		if !l.InFlight {
			lm.windows[strings.TrimSuffix(localName(cl, i), "#req")].open(l.Window, b)
		}
	}
	for i, l := range cl.limits {
		share := localShare(l.Quota, lm.replicas)
		name := localName(cl, i)
		lo, hi, need := 0, 0, cl.cost
		if l.InFlight || l.Requests {
			need = 1
		}
		if l.InFlight {
			for _, ls := range lm.leases[strings.TrimSuffix(name, "#req")] {
				if ls.lo.After(b) {
					lo++
				}
				if ls.hi.After(a) {
					hi++
				}
			}
		} else {
			since := lm.windows[strings.TrimSuffix(name, "#req")].heldSince(l.Window)
			for _, e := range lm.logs[name] {
				if !e.maybe && e.lo.After(b.Add(-l.Window)) && e.lo.After(since) {
					lo += e.units
				}
				if e.hi.Add(lm.slack(name, l.Window)).After(a.Add(-l.Window)) {
					hi += e.units
				}
			}
		}
		if l.Shadow {
			continue
		}
		if lo+need > share {
			canAdmit = false
		}
		if hi+need > share {
			canDeny = true
		}
		detail = append(detail, fmt.Sprintf("%v: share %d, %s counted, %d needed", l, share, rangeString(lo, hi), need))
	}
	switch {
	case res.Allowed && !canAdmit:
		return "FailLocal admitted beyond the call's limits: " + strings.Join(detail, "; ")
	case !res.Allowed && !canDeny:
		return "FailLocal denied within the call's limits: " + strings.Join(detail, "; ")
	}
	if res.Allowed && !peek {
		lm.record(cl)
	}
	return ""
}

// record notes an admission FailLocal made of cl: in each log its
// limits count, its cost (1 in a log of requests), and one place in flight
// a level with an in-flight limit, of the level's lease (leaseOf), as
// Redis's in-flight log takes.
func (lm *localModel) record(cl call) { lm.recordAs(cl, false) }

// mayRecord notes an admission FailLocal may have made of cl and kept:
// "A FailLocal admission made for a caller that left, and taken by no
// other waiter, stays in the process's local count" (WaitN).
func (lm *localModel) mayRecord(cl call) { lm.recordAs(cl, true) }

func (lm *localModel) recordAs(cl call, maybe bool) {
	done := map[string]bool{}
	for i, l := range cl.limits {
		name := localName(cl, i)
		if l.InFlight {
			if maybe || done["lease "+name] {
				continue // a waiter holds no place in flight: Wait decides by the limiter's own limits
			}
			done["lease "+name] = true
			var level []slidelimit.Limit
			for j, x := range cl.limits {
				if localName(cl, j) == name {
					level = append(level, x)
				}
			}
			d := leaseOf(level)
			lm.leases[name] = append(lm.leases[name], localLease{req: cl.req, lo: cl.ra.Add(d), hi: cl.rb.Add(d)})
			continue
		}
		if done[name] {
			continue
		}
		done[name] = true
		units := cl.cost
		if l.Requests {
			units = 1
		}
		lm.logs[name] = append(lm.logs[name], localEntry{lo: cl.ra, hi: cl.rb, units: units, maybe: maybe})
	}
}

// release gives back the places in flight of the request of handle req.
func (lm *localModel) release(req string) {
	for name, ls := range lm.leases {
		lm.leases[name] = slices.DeleteFunc(ls, func(l localLease) bool { return l.req == req })
	}
}

// leaseOf is the lease a request under limits takes in flight: "the
// longest Window of its enforced in-flight limits (of its shadow ones if
// it has none), so that a shadow limit never holds a place an enforced one
// would free" (Limit.InFlight).
func leaseOf(limits []slidelimit.Limit) time.Duration {
	var lease, shadow time.Duration
	for _, l := range limits {
		switch {
		case !l.InFlight:
		case l.Shadow:
			shadow = max(shadow, l.Window)
		default:
			lease = max(lease, l.Window)
		}
	}
	if lease == 0 {
		return shadow
	}
	return lease
}
