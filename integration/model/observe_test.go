package model

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// After each step the checker reads what Redis holds for every identity
// and keeps only the states of the model that hold the same: the layouts
// the scripts' headers state (exact.lua, stepped.lua) are part of the
// protocol the model checks, and reading them tells apart what the answers
// alone may not (a command that may have run after its caller gave up, a
// key that may have expired).

// stored is what Redis holds for one identity, read between a and b.
type stored struct {
	a, b  time.Time
	exact []redis.Z // the exact log, nil if none
	xttl  time.Duration
	steps map[int64]*storedStep
	fly   []redis.Z // the in-flight log, nil if none
	fttl  time.Duration
}

type storedStep struct {
	data   []byte // the stepped log, nil if none
	ttl    time.Duration
	ids    []redis.Z // its ids, nil if none
	idsTTL time.Duration
}

// readStored reads the keys of who under the check's prefix: its exact log
// and the stepped logs of steps.
func (h *harness) readStored(ctx context.Context, who string, steps []int64, inflight bool) (*stored, error) {
	log := h.stem(who)
	c := h.env.reader
	s := &stored{steps: map[int64]*storedStep{}}
	s.a = time.Now()
	var zr *redis.ZSliceCmd
	var xttl, fttl *redis.DurationCmd
	var fr *redis.ZSliceCmd
	gets := map[int64]*redis.StringCmd{}
	ttls, idsTTLs := map[int64]*redis.DurationCmd{}, map[int64]*redis.DurationCmd{}
	ids := map[int64]*redis.ZSliceCmd{}
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		zr = p.ZRangeWithScores(ctx, log+":#0", 0, -1)
		xttl = p.PTTL(ctx, log+":#0")
		if inflight {
			fr = p.ZRangeWithScores(ctx, log+":#inflight", 0, -1)
			fttl = p.PTTL(ctx, log+":#inflight")
		}
		for _, step := range steps {
			key := log + ":#" + strconv.FormatInt(step, 10)
			gets[step] = p.Get(ctx, key)
			ttls[step] = p.PTTL(ctx, key)
			ids[step] = p.ZRangeWithScores(ctx, key+":ids", 0, -1)
			idsTTLs[step] = p.PTTL(ctx, key+":ids")
		}
		return nil
	})
	s.b = time.Now()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	s.exact, s.xttl = zr.Val(), xttl.Val()
	if inflight {
		s.fly, s.fttl = fr.Val(), fttl.Val()
	}
	for _, step := range steps {
		ss := &storedStep{ttl: ttls[step].Val(), ids: ids[step].Val(), idsTTL: idsTTLs[step].Val()}
		if v, err := gets[step].Bytes(); err == nil {
			ss.data = v
		}
		s.steps[step] = ss
	}
	return s, nil
}

// observeLogs keeps, for every identity the model follows, the states that
// hold what Redis holds; none is a failure.
func (h *harness) observeLogs() {
	if h.hist != nil || !h.up || h.failure != "" {
		return
	}
	// A command whose caller gave up may still be on its way.
	time.Sleep(time.Until(h.maybeRan.Add(settleTime)))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	names := make([]string, 0, len(h.ids))
	for name := range h.ids {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, who := range names {
		im := h.ids[who]
		if im.lost != "" {
			continue
		}
		var steps []int64
		for s := range im.longestAt {
			steps = append(steps, s)
		}
		slices.Sort(steps)
		got, err := h.readStored(ctx, who, steps, im.longestLease > 0)
		if err != nil {
			h.t.Logf("reading the logs of %q: %v", who, err)
			continue
		}
		if why := got.layout(); why != "" {
			h.fail(kindStored, "%q: %s", who, why)
			im.lose("a failure passed over")
			continue
		}
		var next []*state
		var whys []string
		for _, s := range im.states {
			if why := s.holds(got, steps); why != "" {
				if len(whys) < 3 {
					whys = append(whys, why)
				}
				continue
			}
			next = append(next, s)
		}
		if len(next) == 0 {
			h.fail(kindStored, "%q holds what no state of the model (%d) holds:\n    %s\n  Redis holds: %s",
				who, len(im.states), strings.Join(whys, "\n    "), got)
			im.lose("a failure passed over")
			continue
		}
		im.settle(next)
	}
}

func (s *stored) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "exact log (ttl %v):", s.xttl)
	for i, z := range s.exact {
		if i == 16 {
			fmt.Fprintf(&b, " … %d more", len(s.exact)-i)
			break
		}
		name := fmt.Sprint(z.Member)
		if !strings.HasPrefix(name, "#") {
			name = fmt.Sprintf("%x", name)
		}
		fmt.Fprintf(&b, " %s@%.0f", name, z.Score)
	}
	for step, ss := range s.steps {
		if ss.data == nil {
			continue
		}
		hd := header(ss.data)
		fmt.Fprintf(&b, "; stepped log of %v (ttl %v): o %v n %v t %v W %v D %v E %v p %v; %d ids (ttl %v)", micro(step), ss.ttl, hd[0], hd[1], hd[2], hd[3], hd[4], hd[5], hd[6], len(ss.ids), ss.idsTTL)
	}
	return b.String()
}

// layout checks what the headers say of every log, whatever the model:
// the exact log holds "one member per admitted request ... the request's
// 8-byte id, scored with its admission time in µs", a cost "id .. "$",
// scored -3 - cost", its record "#e<W>:<Q>:<E>" or "#e<W>:<Q>:<E>:<X>:<H>"
// scored -1 and "#t<T>" scored -2; a stepped log of steppedLogSize bytes.
func (s *stored) layout() string {
	for _, z := range s.exact {
		name := fmt.Sprint(z.Member)
		switch {
		case z.Score == -1 && !exactRecordName.MatchString(name),
			z.Score == -2 && !exactTName.MatchString(name):
			return fmt.Sprintf("the exact log's record %q is scored %v", name, z.Score)
		case z.Score >= 0 && len(name) != 8:
			return fmt.Sprintf("the exact log's request %x (scored %v) is %d bytes, not 8", name, z.Score, len(name))
		case z.Score <= -3 && (len(name) != 9 || name[8] != '$' || z.Score != math.Trunc(z.Score)):
			return fmt.Sprintf("the exact log's cost %x is scored %v", name, z.Score)
		case z.Score < 0 && z.Score > -3 && z.Score != -1 && z.Score != -2:
			return fmt.Sprintf("the exact log holds %q scored %v", name, z.Score)
		}
	}
	for step, ss := range s.steps {
		if ss.data != nil && len(ss.data) != steppedLogSize {
			return fmt.Sprintf("the stepped log of %v is %d bytes, want %d", micro(step), len(ss.data), steppedLogSize)
		}
		// Its ids: "each request the log counts is its 8-byte id, scored
		// with the µs it was admitted at", "id .. "$", scored -3 - cost",
		// and "#", scored -1.
		for _, z := range ss.ids {
			name := fmt.Sprint(z.Member)
			switch {
			case z.Score >= 0 && (len(name) != 8 || z.Score != math.Trunc(z.Score)),
				z.Score <= -3 && (len(name) != 9 || name[8] != '$' || z.Score != math.Trunc(z.Score)),
				z.Score > -3 && z.Score < 0 && (z.Score != -1 || name != "#"):
				return fmt.Sprintf("the ids of the stepped log of %v hold %x scored %v", micro(step), name, z.Score)
			}
		}
	}
	return ""
}

// The names of an exact log's records (exact.lua).
var (
	exactRecordName = regexp.MustCompile(`^#e\d+:\d+:\d{13,}(:-?\d+:\d+)?$`)
	exactTName      = regexp.MustCompile(`^#t\d+$`)
)

// settleTime is how long after the last moment a command whose caller
// gave up may have been sent the checker waits before reading the logs.
const settleTime = 200 * time.Millisecond

// ttlReadSlack is how far a TTL read may be from the model's expiry
// beyond clockLag: MIGRATE sets a moved key's expiry anew on its target, a
// transfer later.
const ttlReadSlack = 50 * time.Millisecond

// holds says how st differs from what Redis holds ("" if it does not),
// and narrows st's expiries to the TTLs read.
func (st *state) holds(s *stored, steps []int64) string {
	if why := st.x.holdsStored(s); why != "" {
		return "exact log: " + why
	}
	if why := st.f.holdsStored(s); why != "" {
		return "in-flight log: " + why
	}
	for _, step := range steps {
		g := st.s[step]
		if g == nil {
			g = &slog{step: step, buckets: map[int64]int64{}}
		}
		if why := g.holdsStored(s.steps[step], s.a, s.b); why != "" {
			return fmt.Sprintf("stepped log of %v: %s", micro(step), why)
		}
		if !g.exists {
			delete(st.s, step)
		}
	}
	return ""
}

// narrow narrows an expiry to a TTL ttl read between a and b, and reports
// whether they agree.
func (e *expiry) narrow(ttl time.Duration, a, b time.Time) bool {
	lo, hi := a.Add(ttl-clockLag-ttlReadSlack), b.Add(ttl+ttlReadSlack)
	if lo.After(e.hi) || hi.Before(e.lo) {
		return false
	}
	if lo.After(e.lo) {
		e.lo = lo
	}
	if hi.Before(e.hi) {
		e.hi = hi
	}
	return true
}

// holds compares the exact log with what Redis holds of it, and narrows
// its expiry; a log Redis has let expire is forgotten.
func (x *xlog) holdsStored(s *stored) string {
	exists := x.rec || len(x.entries) > 0
	if len(s.exact) == 0 {
		if exists && x.exp.lo.Sub(s.b) > expirySlack {
			return "Redis holds none, and it cannot have expired yet"
		}
		*x = xlog{}
		return ""
	}
	if !exists {
		return "Redis holds one, the model none"
	}
	if !x.exp.narrow(s.xttl, s.a, s.b) {
		return fmt.Sprintf("its TTL is %v, want it to end in %v..%v", s.xttl, x.exp.lo.Sub(s.a), x.exp.hi.Sub(s.b))
	}
	// A request's cost, where it is not 1: its id + "$", scored -3 - cost.
	costs := map[string]int{}
	for _, z := range s.exact {
		if z.Score <= -3 {
			costs[strings.TrimSuffix(fmt.Sprint(z.Member), "$")] = int(-3 - z.Score)
		}
	}
	xs, h := 0, 0 // the record's X and H, from what the model holds
	for _, e := range x.entries {
		if e.cost != 1 {
			xs, h = xs+e.cost-1, h+1
		}
	}
	if len(costs) != h {
		return fmt.Sprintf("it holds %d costs, want %d", len(costs), h)
	}
	hasT := false
	requests, units := map[int64]int{}, map[int64]int{}
	held := map[string]int64{}
	for _, z := range s.exact {
		name := fmt.Sprint(z.Member)
		switch {
		case z.Score == -1:
			want := fmt.Sprintf("#e%d:%d:%013d", x.w, x.q, x.e)
			if h > 0 {
				want += fmt.Sprintf(":%d:%d", xs, h)
			}
			if !x.rec || name != want {
				return fmt.Sprintf("its record is %q, want %q", name, want)
			}
		case z.Score == -2:
			hasT = true
			if want := fmt.Sprintf("#t%d", x.t); !x.hasT || name != want {
				return fmt.Sprintf("it holds %q, want T %v", name, x.hasT)
			}
		case z.Score >= 0:
			t := int64(z.Score)
			held[name] = t
			requests[t]++
			if c, ok := costs[name]; ok {
				units[t] += c
			} else {
				units[t]++
			}
		}
	}
	if hasT != x.hasT {
		return fmt.Sprintf("it holds no T, want T %d", x.t)
	}
	wantRequests, wantUnits := map[int64]int{}, map[int64]int{}
	for _, e := range x.entries {
		wantRequests[e.t]++
		wantUnits[e.t] += e.units()
		if e.anon {
			continue
		}
		if t, ok := held[e.id]; !ok || t != e.t {
			return fmt.Sprintf("it lacks %s at %d", e.req, e.t)
		}
		if c, ok := costs[e.id]; ok && c != e.cost || !ok && e.cost != 1 {
			return fmt.Sprintf("it holds %s at a cost of %d, want %d", e.req, c, e.cost)
		}
	}
	for t, n := range requests {
		if n != wantRequests[t] || units[t] != wantUnits[t] {
			return fmt.Sprintf("it holds %d requests of %d units at %d, want %d of %d", n, units[t], t, wantRequests[t], wantUnits[t])
		}
	}
	for t, n := range wantRequests {
		if requests[t] == 0 {
			return fmt.Sprintf("it holds no request at %d, want %d", t, n)
		}
	}
	return ""
}

// header returns a stepped log's header: o, n, t, W, D, E and p.
func header(data []byte) [7]float64 {
	var h [7]float64
	for i := range h {
		h[i] = math.Float64frombits(binary.LittleEndian.Uint64(data[8*i:]))
	}
	return h
}

// holdsStored compares the stepped log with what Redis holds of it (ss),
// and narrows its expiry; a log Redis has let expire is forgotten.
func (g *slog) holdsStored(ss *storedStep, a, b time.Time) string {
	if ss == nil || ss.data == nil {
		if g.exists && g.exp.lo.Sub(b) > expirySlack {
			return "Redis holds none, and it cannot have expired yet"
		}
		*g = slog{step: g.step, buckets: map[int64]int64{}}
		return ""
	}
	if !g.exists {
		return "Redis holds one, the model none"
	}
	if !g.exp.narrow(ss.ttl, a, b) {
		return fmt.Sprintf("its TTL is %v, want it to end in %v..%v", ss.ttl, g.exp.lo.Sub(a), g.exp.hi.Sub(b))
	}
	d := ss.data
	// "p, the units of bucket n", which counts in the header, not in its
	// slot.
	var p int64
	if g.t > 0 {
		p = g.buckets[g.n]
	}
	if h, want := header(d), [7]float64{float64(g.o), float64(g.n), float64(g.t), float64(g.w), float64(g.due16) / 16, float64(g.e), float64(p)}; h != want {
		return fmt.Sprintf("its header (o, n, t, W, D, E, p) is %v, want %v", h, want)
	}
	if why := g.holdsIDs(ss, a, b); why != "" {
		return why
	}
	// "bucket b in slot b % RING, for b in o..n-1": the other slots may
	// hold the count of a bucket gone, written over as their bucket enters.
	if g.t > 0 {
		const ring0, ring = 60, 1444
		for bk := g.o; bk < g.n; bk++ {
			slot := int(bk % ring)
			if got, want := int64(binary.BigEndian.Uint16(d[ring0+6*slot:]))<<32|int64(binary.BigEndian.Uint32(d[ring0+6*slot+2:])), g.buckets[bk]; got != want { // 48 bits
				return fmt.Sprintf("its ring slot %d (bucket %d) counts %d, want %d", slot, bk, got, want)
			}
		}
	}
	return ""
}

// holdsIDs compares the stepped log's ids with what Redis holds of them:
// "each request the log counts is its 8-byte id, scored with the µs it was
// admitted at (the start of its bucket if it went to a later one)", "A
// request settled to a cost other than the one it was admitted for ... has
// a second member, id .. "$", scored -3 - cost", and "the set holds "#",
// scored -1, so that it lives, and expires, with the log". A synthetic id
// is matched by its score and its cost member.
func (g *slog) holdsIDs(ss *storedStep, a, b time.Time) string {
	if len(ss.ids) == 0 {
		return "it has no ids, not even \"#\""
	}
	if !g.exp.narrow(ss.idsTTL, a, b) {
		return fmt.Sprintf("its ids' TTL is %v, want it to end in %v..%v", ss.idsTTL, g.exp.lo.Sub(a), g.exp.hi.Sub(b))
	}
	scores, costs := map[string]int64{}, map[string]int64{}
	sentinel := false
	for _, z := range ss.ids {
		name := fmt.Sprint(z.Member)
		switch {
		case z.Score == -1:
			sentinel = true
		case z.Score <= -3:
			costs[strings.TrimSuffix(name, "$")] = -3 - int64(z.Score)
		default:
			scores[name] = int64(z.Score)
		}
	}
	if !sentinel {
		return "its ids hold no \"#\""
	}
	if len(scores) != len(g.ids) {
		return fmt.Sprintf("its ids hold %d requests, want %d", len(scores), len(g.ids))
	}
	// A cost member, if any: its units, else -1.
	costOf := func(sl slot) int64 {
		if sl.units == sl.n {
			return -1
		}
		return sl.units
	}
	anon := map[[2]int64]int{} // (score, cost member) of the synthetic ids
	for _, sl := range g.ids {
		if sl.anon {
			anon[[2]int64{sl.at, costOf(sl)}]++
			continue
		}
		at, ok := scores[sl.id]
		units, costed := costs[sl.id]
		if !costed {
			units = -1
		}
		if !ok || at != sl.at || units != costOf(sl) {
			return fmt.Sprintf("its id %x is held %v at %d with a cost of %d (-1: none), want at %d with %d (admitted for %d, now %d units)",
				sl.id, ok, at, units, sl.at, costOf(sl), sl.n, sl.units)
		}
		delete(scores, sl.id)
		delete(costs, sl.id)
	}
	for name, at := range scores {
		units, costed := costs[name]
		if !costed {
			units = -1
		}
		delete(costs, name)
		if k := [2]int64{at, units}; anon[k] > 0 {
			anon[k]--
			continue
		}
		return fmt.Sprintf("its ids hold %x at %d with a cost of %d (-1: none), which the model does not", name, at, units)
	}
	if len(costs) > 0 {
		return fmt.Sprintf("its ids hold %d costs of no request", len(costs))
	}
	return ""
}

// holdsStored compares the in-flight log with what Redis holds of it (if
// read), and narrows its expiry; a log Redis has let expire is forgotten.
// Its leases are its members, each the request's id scored with the µs
// its lease ends.
func (f *flog) holdsStored(s *stored) string {
	if s.fly == nil && s.fttl == 0 {
		return "" // not read
	}
	// The estimate of a hold, scored -1 (inflight.lua), apart from the
	// leases.
	var leases []redis.Z
	est := ""
	for _, z := range s.fly {
		if z.Score == -1 {
			est = fmt.Sprint(z.Member)
			continue
		}
		leases = append(leases, z)
	}
	if len(s.fly) > 0 {
		want := ""
		if f.est {
			want = fmt.Sprintf("#h%d:%d", f.hold, f.d)
		}
		if est != want {
			return fmt.Sprintf("its estimate of a hold is %q, want %q", est, want)
		}
	}
	if len(s.fly) == 0 {
		if (len(f.leases) > 0 || f.est) && f.exp.lo.Sub(s.b) > expirySlack {
			return fmt.Sprintf("Redis holds none, and it cannot have expired yet (%d leases, the last ending at %d)", len(f.leases), f.leases[len(f.leases)-1].end)
		}
		*f = flog{}
		return ""
	}
	if len(f.leases) == 0 && !f.est {
		return fmt.Sprintf("Redis holds %d leases, the model none", len(s.fly))
	}
	if !f.exp.narrow(s.fttl, s.a, s.b) {
		return fmt.Sprintf("its TTL is %v, want it to end in %v..%v", s.fttl, f.exp.lo.Sub(s.a), f.exp.hi.Sub(s.b))
	}
	if len(leases) != len(f.leases) {
		return fmt.Sprintf("it holds %d leases, want %d", len(leases), len(f.leases))
	}
	held := map[string]int64{}
	ends := map[int64]int{}
	for _, z := range leases {
		held[fmt.Sprint(z.Member)] = int64(z.Score)
		ends[int64(z.Score)]++
	}
	for _, l := range f.leases {
		if ends[l.end]--; ends[l.end] < 0 {
			return fmt.Sprintf("it holds no lease ending at %d (%s)", l.end, l.req)
		}
		if end, ok := held[l.id]; !l.anon && (!ok || end != l.end) {
			return fmt.Sprintf("the lease of %s ends at %d (held %v), want %d", l.req, end, ok, l.end)
		}
	}
	return ""
}
