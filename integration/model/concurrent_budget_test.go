package model

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	slidelimit "github.com/slidelimit/slidelimit/core"
	"pgregory.net/rapid"
)

// What users combine, in the concurrent modes: plans of several limits,
// places in flight with Release, tenants' trees, and settles, all at once
// from several processes; judged by the invariants below and by the quota
// check of every log.

// shortInFlight is what places in flight are made of where time is real.
var shortInFlight = []slidelimit.Limit{
	slidelimit.InFlight(3, 300*time.Millisecond),
	slidelimit.InFlight(2, time.Second),
}

// genShortPlan draws a per-call plan: one or two limits of units, and
// perhaps a limit in flight.
func genShortPlan(t *rapid.T) plan {
	p := plan{rapid.SampledFrom(shortCatalogue).Draw(t, "plan")}
	if rapid.Bool().Draw(t, "plan of two") {
		if l := rapid.SampledFrom(shortCatalogue).Draw(t, "plan"); l != p[0] {
			p = append(p, l)
		}
	}
	if rapid.IntRange(0, 2).Draw(t, "plan in flight") == 2 {
		p = append(p, rapid.SampledFrom(shortInFlight).Draw(t, "lease"))
	}
	return p
}

// genShortTree draws a tenant's tree: the tenant and a team, a limit or
// two each, named apart.
func genShortTree(t *rapid.T) []slidelimit.Level {
	var tree []slidelimit.Level
	for i, id := range []string{"", "team"} {
		lv := slidelimit.Level{Identity: id}
		for j, l := range genShortPlan(t) {
			if !l.InFlight {
				lv.Limits = append(lv.Limits, l.Named(fmt.Sprintf("l%d.%d", i, j)))
			}
		}
		tree = append(tree, lv)
	}
	return tree
}

// settleTrial is one attempt to correct an admitted request.
type settleTrial struct {
	kind string // settle, release or refund
	cost int    // settle's units
	a, b time.Time
	err  error
}

// settleRoundOp corrects past calls at once, each through a limiter of its
// own: Settle to fewer or more units, Release, Refund.
type settleRoundOp struct{ Items []settleOp }

func (o settleRoundOp) String() string {
	parts := make([]string, len(o.Items))
	for i, it := range o.Items {
		parts[i] = "\n\t\t\t" + it.String() + ","
	}
	return fmt.Sprintf("settleRoundOp{Items: []settleOp{%s\n\t\t}}", strings.Join(parts, ""))
}

func (o settleRoundOp) run(h *harness) {
	trials := make([]settleTrial, len(o.Items))
	var wg sync.WaitGroup
	for i, it := range o.Items {
		rec := h.calls[it.Of]
		if rec == nil {
			continue
		}
		trials[i] = settleTrial{kind: it.Kind, cost: it.Cost}
		wg.Add(1)
		go func() {
			defer wg.Done()
			lim, ctx := h.lims[it.Via], context.Background()
			tr := &trials[i]
			tr.a = time.Now()
			switch it.Kind {
			case "settle":
				tr.err = lim.Settle(ctx, rec.res, it.Cost)
			case "release":
				tr.err = lim.Release(ctx, rec.res)
			default:
				tr.err = lim.Refund(ctx, rec.res)
			}
			tr.b = time.Now()
		}()
	}
	wg.Wait()
	for i, it := range o.Items {
		if h.calls[it.Of] == nil {
			continue
		}
		if err := trials[i].err; err != nil && !isUnavailable(err) {
			h.fail(kindSettle, "%s: %s = %v, want nil or an error wrapping ErrUnavailable", it, it.Kind, err)
			return
		}
		h.hist.settles[it.Of] = append(h.hist.settles[it.Of], trials[i])
		h.hist.judged[it.Kind+"s"]++
	}
}

// genSettleRound draws corrections of up to 8 past calls admitted by Redis.
func genSettleRound(t *rapid.T, h *harness) op {
	var admitted []string
	for _, r := range h.hist.records {
		if r.admitted() && !slices.Contains(admitted, r.c.Req) {
			admitted = append(admitted, r.c.Req)
		}
	}
	if len(admitted) == 0 {
		return genSleep(t)
	}
	n := rapid.IntRange(1, 8).Draw(t, "settles")
	var o settleRoundOp
	for range n {
		it := settleOp{Of: rapid.SampledFrom(admitted).Draw(t, "settle of"), Via: rapid.IntRange(0, len(h.lims)-1).Draw(t, "settle via"),
			Kind: rapid.SampledFrom([]string{"settle", "release", "refund"}).Draw(t, "settle kind")}
		if it.Kind == "settle" {
			cost := h.calls[it.Of].call.Cost
			it.Cost = rapid.SampledFrom([]int{0, max(0, cost-1), cost, cost + 1, 2 * cost}).Draw(t, "settled cost")
		}
		o.Items = append(o.Items, it)
	}
	return o
}

// leastUnits is the fewest units r's request surely counts at: its cost, or
// fewer if a settle tried to leave fewer (it may have run, even if it
// failed).
func (hi *history) leastUnits(r *record) int {
	u := r.c.Cost
	for _, s := range hi.settles[r.c.Req] {
		switch s.kind {
		case "settle":
			u = min(u, s.cost)
		case "refund":
			u = 0
		}
	}
	return u
}

// mostUnits is the most units r's request may count at.
func (hi *history) mostUnits(r *record) int {
	u := r.c.Cost
	for _, s := range hi.settles[r.c.Req] {
		if s.kind == "settle" {
			u = max(u, s.cost)
		}
	}
	return u
}

// logAdmissions is the admissions counted in one identity's logs (a
// level of a tenant's tree is an identity of its own), each with the
// limits of its call that count there.
type logAdmissions struct {
	who string
	adm []*record
}

// logsOf splits admissions by the identity whose logs each limit counts,
// leaving out limits in flight, which hold places, not units.
func logsOf(adm []*record) []logAdmissions {
	var out []logAdmissions
	at := map[string]int{}
	for _, r := range adm {
		parts := map[string][]slidelimit.Limit{}
		var order []string
		for i, l := range r.limits {
			if l.InFlight {
				continue
			}
			who := r.c.Who
			if r.levels != nil && r.levels[i] != "" {
				who += "/" + r.levels[i]
			}
			if parts[who] == nil {
				order = append(order, who)
			}
			parts[who] = append(parts[who], l)
		}
		for _, who := range order {
			x := *r
			x.limits = parts[who]
			i, ok := at[who]
			if !ok {
				i = len(out)
				at[who] = i
				out = append(out, logAdmissions{who: who})
			}
			out[i].adm = append(out[i].adm, &x)
		}
	}
	return out
}

// recordLease is the lease r took in flight (0: none): leaseOf its
// limits.
func recordLease(r *record) time.Duration { return leaseOf(r.limits) }

// inFlightViolation finds an admission under a limit in flight that
// surely found its quota of places held: admissions decided before its
// call began, whose leases surely had not ended and that no settle,
// release or refund had begun to give back by the time its call ended.
// Every limit in flight of an identity counts the places of its one
// in-flight log.
func (hi *history) inFlightViolation(first map[string]*record) string {
	for _, r := range first {
		for _, l := range r.limits {
			if !l.InFlight || l.Shadow {
				continue
			}
			var held []string
			for _, x := range first {
				lease := recordLease(x)
				if x == r || x.c.Who != r.c.Who || lease == 0 || !x.b.Before(r.a) || !x.a.Add(lease).After(r.b) {
					continue
				}
				freed := false
				for _, s := range hi.settles[x.c.Req] {
					freed = freed || s.a.Before(r.b)
				}
				if !freed {
					held = append(held, fmt.Sprintf("%s(+%v)", x.c.Req, r.a.Sub(x.b).Round(time.Millisecond)))
				}
			}
			if len(held) >= l.Quota {
				return fmt.Sprintf("%q: %s admitted %s while %d places were surely held (%s): in flight above its quota",
					r.c.Who, l, r.c.Req, len(held), strings.Join(held, ", "))
			}
		}
	}
	return ""
}

// judgeStored reads, once a round has ended, what each log of its
// identities holds (a Peek of each limit of units used on them) and
// checks it against the most the history may have put there: the units of
// every call that may have been admitted (a denial records nothing, a
// decision is all-or-nothing) and may still count in the limit's window,
// at the most a settle may have left. Logs of a tenant's levels are
// judged by the quota check alone.
func (hi *history) judgeStored(round []*record) {
	h := hi.h
	var lim *slidelimit.Limiter
	for i, s := range h.specs {
		if s.strict() {
			lim = h.lims[i]
		}
	}
	if lim == nil {
		return
	}
	type key struct {
		who string
		l   slidelimit.Limit
	}
	var keys []key
	for _, r := range round {
		for i, l := range r.limits {
			k := key{r.c.Who, l.Named("")}
			if !l.InFlight && (r.levels == nil || r.levels[i] == "") && !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	for _, k := range keys {
		a := time.Now()
		res, err := lim.PeekLimits(context.Background(), k.who, k.l)
		if err != nil || res.Fallback || len(res.Statuses) != 1 || res.Statuses[0].Remaining <= 0 {
			continue // nothing read, or a count at or past the quota, which Remaining does not tell
		}
		hi.judged["logs' counts read"]++
		count := k.l.Quota - res.Statuses[0].Remaining
		w, step := k.l.Window.Microseconds(), k.l.Resolution().Microseconds()
		most, seen := 0, map[string]bool{}
		var from []string
		for _, x := range hi.records {
			// A call that Redis surely denied (or a Peek) recorded
			// nothing; any other may have been recorded, once per id.
			if x.c.Peek || x.err == nil && !x.res.Fallback && !x.res.Allowed && !x.res.Cached && !x.res.Shadow ||
				x.err == nil && x.res.Cached || x.c.Who != k.who || x.c.ID && seen[x.c.Req] {
				continue
			}
			writes := false
			for i, l := range x.limits {
				writes = writes || !l.InFlight && l.Resolution() == k.l.Resolution() && (x.levels == nil || x.levels[i] == "")
			}
			if !writes || x.b.UnixMicro() <= a.UnixMicro()-w-step {
				continue
			}
			seen[x.c.Req] = true
			most += hi.mostUnits(x)
			from = append(from, fmt.Sprintf("%s(%d)", x.c.Req, hi.mostUnits(x)))
		}
		if count > most {
			h.fail(kindStored, "%q: %v counts %d units after the round, but the calls that may still count in its window were admitted with at most %d: %s",
				k.who, k.l, count, most, strings.Join(from, " "))
			return
		}
	}
}
