package model

import (
	"context"
	"errors"
	"fmt"
	stdlog "log/slog"
	"net"
	"strings"
	"sync"
	"time"

	slidelimit "github.com/slidelimit/slidelimit/core"
	"pgregory.net/rapid"
)

// Settlements across an outage (Limiter.Settle: "A Settle, Refund or
// Release that fails with ErrUnavailable is not lost"). The fault is a
// partition: every process is cut off from Redis, which runs on and keeps
// its data, so that a settlement made meanwhile surely did not run, and
// lands only once the partition heals. The model keeps what each request's
// admitting limiter keeps, the newest settlement of each request carrying
// an older one, and drains it at a moment it names (FlushSettlements, the
// test clock frozen), where it lands as if made then, unless the request
// has left every window and lease it counts in. Every settlement that
// fails while Redis answers (a lost reply, a breaker still open) is
// drained at once, in its own step, so that no replay lands at a moment
// the model does not know.

// partition cuts a mode's processes off from Redis, as a network partition
// would: nothing a process sends while cut reaches Redis (its connections
// are closed, new ones refused, and a write on one not yet closed fails),
// and Redis keeps its data. The checker's own clients (admins, reader) are
// not cut. It is safe for concurrent use.
type partition struct {
	mu    sync.Mutex
	cut   bool
	conns map[*gatedConn]bool
}

var errPartitioned = errors.New("model: partitioned from Redis")

// dial is the processes' go-redis Dialer.
func (p *partition) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if p.isCut() {
		return nil, errPartitioned
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	g := &gatedConn{Conn: c, p: p}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		_ = c.Close()
		return nil, errPartitioned
	}
	if p.conns == nil {
		p.conns = map[*gatedConn]bool{}
	}
	p.conns[g] = true
	return g, nil
}

func (p *partition) isCut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut
}

// sever cuts the processes off: every connection closed, none opened.
func (p *partition) sever() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		_ = c.Conn.Close()
	}
	p.conns = nil
}

// heal lets the processes reach Redis again.
func (p *partition) heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}

// gatedConn is a process's connection, whose writes fail while cut.
type gatedConn struct {
	net.Conn
	p *partition
}

func (c *gatedConn) Write(b []byte) (int, error) {
	if c.p.isCut() {
		return 0, errPartitioned
	}
	return c.Conn.Write(b)
}

func (c *gatedConn) Close() error {
	c.p.mu.Lock()
	delete(c.p.conns, c)
	c.p.mu.Unlock()
	return c.Conn.Close()
}

// cutOp partitions every process from Redis; healOp ends the partition and
// drains what the limiters kept.
type cutOp struct{}

func (cutOp) String() string { return "cutOp{}" }

func (cutOp) run(h *harness) {
	if h.cut {
		return
	}
	h.env.gate.sever()
	h.cut = true
}

type healOp struct{}

func (healOp) String() string { return "healOp{}" }

func (healOp) run(h *harness) {
	if !h.cut {
		return
	}
	now := h.clock.freeze()
	defer h.clock.unfreeze()
	h.env.gate.heal()
	h.cut, h.env.healed = false, time.Now()
	if h.up {
		h.drain(now)
	}
}

// reach reports whether the processes' calls reach Redis: it runs, and no
// partition cuts them off.
func (h *harness) reach() bool { return h.up && !h.cut }

// keptSettle is a settlement the model holds kept by the limiter that
// admitted its request: Settle or Refund to units, or a Release (units -1).
type keptSettle struct {
	units int
	by    int // the limiter that admitted the request, which keeps it
}

// replayCount is what a limiter's reports say, or the model says they
// should, came of the settlements it kept.
type replayCount struct{ landed, expired, dropped int64 }

// replayLog is a limiter's logger: it adds up the reports of its kept
// settlements ("the settlements Redis could not take are settled").
type replayLog struct {
	mu  sync.Mutex
	sum replayCount
}

func (r *replayLog) Enabled(context.Context, stdlog.Level) bool { return true }
func (r *replayLog) WithAttrs([]stdlog.Attr) stdlog.Handler     { return r }
func (r *replayLog) WithGroup(string) stdlog.Handler            { return r }
func (r *replayLog) Handle(_ context.Context, rec stdlog.Record) error {
	if rec.Message != "slidelimit: the settlements Redis could not take are settled" {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	rec.Attrs(func(a stdlog.Attr) bool {
		switch a.Key {
		case "landed":
			r.sum.landed += a.Value.Int64()
		case "left_their_windows":
			r.sum.expired += a.Value.Int64()
		case "dropped":
			r.sum.dropped += a.Value.Int64()
		}
		return true
	})
	return nil
}

func (r *replayLog) reported() replayCount {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sum
}

// untilOf is when a request decided at now (µs, test clock) under limits
// has left every window and lease it counts in, before any Shift or Renew:
// its longest Window, with its Step if stepped.
func untilOf(now int64, limits []slidelimit.Limit) int64 {
	var span time.Duration
	for _, l := range limits {
		span = max(span, l.Window+l.Resolution())
	}
	return now + span.Microseconds()
}

// longestStep is the longest Step of limits, 0 if all are exact.
func longestStep(limits []slidelimit.Limit) time.Duration {
	var step time.Duration
	for _, l := range limits {
		step = max(step, l.Resolution())
	}
	return step
}

// drain lands what the limiters keep, at now (µs, test clock, frozen):
// FlushSettlements on each must return nil, Redis answering; then each
// settlement the model holds kept lands as made at now, unless its request
// had left every window and lease by then, and the limiters' reports must
// say so.
func (h *harness) drain(now int64) {
	a := time.Now()
	for i, lim := range h.lims {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := lim.FlushSettlements(ctx)
		cancel()
		if err != nil {
			h.fail(kindReplay, "limiter %d: FlushSettlements = %v 10 s after Redis answered again", i, err)
			return
		}
	}
	b := time.Now()
	for _, req := range h.order {
		k := h.kept[req]
		if k == nil {
			continue
		}
		delete(h.kept, req)
		rec := h.calls[req]
		if now > rec.until {
			h.replayWant[k.by].expired++
			continue
		}
		h.replayWant[k.by].landed++
		h.landKept(rec, k.units, now, a, b)
	}
	h.checkReplays()
}

// landKept applies to the model a kept settlement of rec to units (-1: a
// Release) that ran at now, between a and b: it lands on its units from
// whatever the client held the request at, and releases its places.
func (h *harness) landKept(rec *callRec, units int, now int64, a, b time.Time) {
	lo, hi := rec.bounds()
	act := settleAct{id: idOf(rec.call.Req), at: rec.now, lo: lo, old: hi, units: units, lease: leaseRelease, now: now, ra: a, rb: b}
	cl := h.callOf(rec.call, h.limitsOf(rec.call), now, a, b)
	for _, g := range groupsOf(cl) {
		h.identity(g.name).each(func(s *state) []*state { return h.settleIn(s, g, cl, act, a, b, -1, -1) })
	}
	if units >= 0 {
		rec.settled, rec.unsure = units+1, false
	}
	for i := range h.lims {
		h.denials.staleFrom(i, rec.call.Who)
	}
}

// afterWait drains, at the frozen now of a step that made Wait calls, what
// a Wait's own refunds left kept (a waiter that left while Redis was
// paused: WaitN refunds an admission made for it), so that it lands in the
// step, which the model holds may have refunded, and not at a moment it
// does not know.
func (h *harness) afterWait(now int64) {
	h.waited = true
	if h.reach() && h.failure == "" {
		h.drain(now)
	}
}

// checkReplays holds each limiter's reports to what the model says came of
// the settlements it kept: equal once the model holds none kept by it (a
// report comes when none is left), and never more before. Once a Wait ran,
// whose own refunds the model does not follow, each count is at least the
// model's.
func (h *harness) checkReplays() {
	if h.failure != "" {
		return
	}
	waiting := make([]bool, len(h.lims))
	for _, k := range h.kept {
		waiting[k.by] = true
	}
	deadline := time.Now().Add(5 * time.Second)
	for i, log := range h.replayLogs {
		want := h.replayWant[i]
		for {
			got := log.reported()
			if got == want {
				break
			}
			if waiting[i] && (h.waited || got.landed <= want.landed && got.expired <= want.expired && got.dropped <= want.dropped) {
				break
			}
			if !waiting[i] && h.waited && got.landed >= want.landed && got.expired >= want.expired && got.dropped >= want.dropped {
				break
			}
			if time.Now().After(deadline) {
				h.fail(kindReplay, "limiter %d reported %+v of the settlements it kept (landed, left every window, dropped), want %+v%s",
					i, got, want, map[bool]string{true: " so far", false: ""}[waiting[i]])
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// keeps reports whether a settlement of kind is kept when it fails with
// ErrUnavailable: Settle, Refund and Release.
func keeps(kind string) bool { return kind == "settle" || kind == "refund" || kind == "release" }

// outageRefund is refundPeekOp's refund across an outage, in the
// concurrent modes: the processes are cut off, the Refund fails, the
// partition heals and FlushSettlements lands it, which the peek after then
// sees. It returns the Refund's error as the peek judges it: nil once it
// landed.
func (h *harness) outageRefund(o refundPeekOp, lim *slidelimit.Limiter, r slidelimit.Result) error {
	by := h.lims[h.calls[o.Of].call.Lim]
	log := h.replayLogs[h.calls[o.Of].call.Lim]
	before := log.reported()
	h.env.gate.sever()
	err := lim.Refund(context.Background(), r)
	h.env.gate.heal()
	h.env.healed = time.Now()
	if !isUnavailable(err) {
		h.fail(kindReplay, "%s: Refund with every process cut off from Redis = %v, want ErrUnavailable", o, err)
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := by.FlushSettlements(ctx); err != nil {
		h.fail(kindReplay, "%s: FlushSettlements = %v 10 s after Redis answered again", o, err)
		return err
	}
	// Once none is left, the limiter reports: this one among them.
	for {
		got := log.reported()
		n := got.landed + got.expired + got.dropped - before.landed - before.expired - before.dropped
		if n >= 1 {
			break
		}
		if ctx.Err() != nil {
			h.fail(kindReplay, "%s: no report of the kept refund once FlushSettlements returned (reports %+v, before %+v)", o, got, before)
			return ctx.Err()
		}
		time.Sleep(5 * time.Millisecond)
	}
	h.hist.judged["refunds across an outage"]++
	return nil
}

// outageOp settles past calls while every process is cut off from Redis
// (each fails, and is kept), moves the clock by Advance (past some of their
// windows, perhaps), and heals: what was kept lands then, the newest
// settlement of each request carrying an older one, or is dropped if its
// request left every window.
type outageOp struct {
	Settles []settleOp
	Advance time.Duration
}

func (o outageOp) String() string {
	parts := make([]string, len(o.Settles))
	for i, s := range o.Settles {
		parts[i] = "\n\t\t\t" + s.String() + ","
	}
	return fmt.Sprintf("outageOp{Advance: %s, Settles: []settleOp{%s\n\t\t}}", durString(o.Advance), strings.Join(parts, ""))
}

func (o outageOp) run(h *harness) {
	cutOp{}.run(h)
	for _, s := range o.Settles {
		s.run(h)
		if h.failure != "" {
			return
		}
	}
	h.clock.advance(o.Advance)
	healOp{}.run(h)
}

// genOutage draws an outageOp: one to three Settles, Refunds or Releases
// of past calls, half the time the later ones of the same call as the
// first (a newer settlement of a kept one).
func genOutage(t *rapid.T, h *harness) op {
	first, ok := pickNear(t, h, "outage settle of")
	if !ok {
		return genAllow(t, h)
	}
	o := outageOp{Advance: rapid.SampledFrom([]time.Duration{0, 10 * time.Millisecond, time.Second, time.Minute, time.Hour}).Draw(t, "outage advance")}
	n := rapid.IntRange(1, 3).Draw(t, "outage settles")
	for i := range n {
		of := first
		if i > 0 && rapid.Bool().Draw(t, "outage settle of another") {
			of, _ = pickNear(t, h, "outage settle of")
		}
		s := settleOp{Of: of, Via: rapid.IntRange(0, len(h.lims)-1).Draw(t, "outage settle via"),
			Kind: rapid.SampledFrom([]string{"settle", "release", "refund"}).Draw(t, "outage settle kind")}
		if s.Kind == "settle" {
			cost := h.calls[of].cost()
			s.Cost = rapid.SampledFrom([]int{0, max(0, cost-1), cost, cost + 1, 2*cost + 1}).Draw(t, "outage settle to")
		}
		o.Settles = append(o.Settles, s)
	}
	return o
}
