package script

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// strictPrelude replaces the scripts' first line, so that every
// redis.call is checked: a command on a key the call did not declare in
// KEYS fails the script. TIME names no key; every other command the
// scripts send names its key first (DEL, all of its arguments).
const strictPrelude = `
local declared = {}
for _, k in ipairs(KEYS) do declared[k] = true end
local function call(cmd, ...)
  local args = {...}
  local keys = {}
  if cmd == 'DEL' then keys = args elseif cmd ~= 'TIME' then keys = {args[1]} end
  for _, k in ipairs(keys) do
    if not declared[k] then
      error('undeclared key ' .. tostring(k) .. ' in ' .. cmd)
    end
  end
  return redis.call(cmd, ...)
end
`

// The allow and refund scripts, checked.
var (
	strictSource = strings.Replace(allowSource, "local call = redis.call\n", strictPrelude, 1)
	strict       = redis.NewScript(strictSource)
	strictSettle = redis.NewScript(strings.Replace(logsSource+settleSource, "local call = redis.call\n", strictPrelude, 1))
)

// harness runs decisions of one identity on a caller's clock.
type harness struct {
	t      *testing.T
	rdb    *redis.Client
	log    string // the identity's exact log; stepped logs are named after it
	now    int64  // µs
	script *redis.Script
	costs  map[string]int // the cost each id was admitted for
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	rdb := redistest.Client(t)
	return &harness{t: t, rdb: rdb, log: redistest.Prefix(t) + "{id}", now: time.Now().UnixMicro(), script: strict, costs: map[string]int{}}
}

// keys returns the keys of plan p's decisions.
func (h *harness) keys(p *Plan) []string { return keysOf(h.log, p) }

// keysOf returns the keys of plan p's decisions for the identity of stem
// log.
func keysOf(log string, p *Plan) []string {
	var keys []string
	for _, part := range p.Parts() {
		k := log
		if part.Level > 0 {
			k += "/" + strconv.Itoa(part.Level)
		}
		switch {
		case part.Step == InFlightStep:
			k += ":#inflight"
		case part.Step > 0:
			k += ":#" + strconv.FormatInt(part.Step, 10)
		}
		if part.IDs {
			k += ":ids"
		}
		keys = append(keys, k)
	}
	return keys
}

// decide runs one decision of plan p and returns its reply.
func (h *harness) decide(p *Plan, cost int, id string) (allowed, duplicate bool, st []Status) {
	h.t.Helper()
	cmd := p.Command(h.keys(p), cost, id, strconv.FormatInt(h.now, 10))
	reply, err := Reply(h.script.Run(h.t.Context(), h.rdb, cmd.Keys(), cmd.Args()...).Result())
	if err != nil {
		h.t.Fatalf("decide(cost %d, id %x): %v", cost, id, err)
	}
	st = make([]Status, p.Limits())
	allowed, duplicate, err = p.Decode(reply, st)
	if err != nil {
		h.t.Fatal(err)
	}
	if allowed && !duplicate && id != "" {
		h.costs[id] = cost
	}
	return allowed, duplicate, st
}

// settle runs the settle script for a request of plan p recorded at cost
// recorded: to cost (below 0: kept) and with lease; it returns the units
// the request's first part held before.
func (h *harness) settle(p *Plan, recorded, cost int, id, lease string) int64 {
	h.t.Helper()
	reply, err := strictSettle.Run(h.t.Context(), h.rdb, h.keys(p), p.SettleArgs(id, h.now, h.costs[id], recorded, recorded, cost, lease, strconv.FormatInt(h.now, 10), 0)...).Int64Slice()
	if err != nil {
		h.t.Fatalf("settle(%x): %v", id, err)
	}
	units, _, _, err := Settled(reply)
	if err != nil {
		h.t.Fatal(err)
	}
	return int64(units)
}

// refund settles a request of plan p to 0 and releases it.
func (h *harness) refund(p *Plan, cost int, id string) int64 {
	return h.settle(p, cost, 0, id, LeaseRelease)
}

// units returns the units the exact log holds.
func (h *harness) units() int64 {
	h.t.Helper()
	return redistest.ExactLogUnits(h.t, h.rdb, h.log)
}

func newID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return string(b)
}

func exact(q int, w time.Duration) Limit { return Limit{Quota: q, Window: w.Microseconds()} }

func stepped(q int, w, s time.Duration) Limit {
	return Limit{Quota: q, Window: w.Microseconds(), Step: s.Microseconds()}
}

// TestEveryCommandNamesADeclaredKey runs every kind of decision and refund
// through scripts that fail any command on a key not in KEYS.
func TestEveryCommandNamesADeclaredKey(t *testing.T) {
	h := newHarness(t)
	plans := []*Plan{
		NewPlan([]Limit{exact(3, time.Second)}),
		NewPlan([]Limit{exact(3, time.Second), exact(5, time.Minute)}),
		NewPlan([]Limit{stepped(3, time.Minute, time.Second)}),
		NewPlan([]Limit{exact(2, time.Second), stepped(4, time.Hour, time.Minute), stepped(9, time.Minute, time.Second)}),
	}
	for round := range 3 {
		for _, p := range plans {
			var ids []string
			for range 6 {
				id := newID()
				if ok, _, _ := h.decide(p, 1, id); ok {
					ids = append(ids, id)
				}
				h.decide(p, 1, "") // a peek
				h.decide(p, 1, id) // a retry
			}
			if len(ids) == 0 {
				t.Fatalf("round %d: plan %v admitted nothing", round, p.spec)
			}
			h.refund(p, 1, ids[0])
			h.now += time.Hour.Microseconds()
		}
	}
	// The batch form, several identities at once.
	p := plans[3]
	var cmds []Command
	for i := range 4 {
		log := h.log + strconv.Itoa(i)
		cmds = append(cmds, p.Command(keysOf(log, p), 1, newID(), ""))
	}
	args := Batch(cmds, true)
	args[1] = strictSource
	if err := h.rdb.Do(t.Context(), args...).Err(); err != nil {
		t.Fatalf("batch: %v", err)
	}
}

// TestBatchDecidesInOrder runs the batch form: its requests are decided one
// after another, as that many calls would be, and a key holding another
// type fails its own request only.
func TestBatchDecidesInOrder(t *testing.T) {
	h := newHarness(t)
	p := NewPlan([]Limit{exact(3, time.Minute)})
	wrong := h.log + "wrong"
	if err := h.rdb.Set(t.Context(), wrong, "x", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	var cmds []Command
	for i := range 5 {
		key := h.log
		if i == 2 {
			key = wrong
		}
		cmds = append(cmds, p.Command([]string{key}, 1, newID(), ""))
	}
	replies, err := h.rdb.Do(t.Context(), Batch(cmds, true)...).Slice()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"allowed 2", "allowed 1", "error", "allowed 0", "denied 0"}
	for i, w := range want {
		reply, err := BatchReply(replies, i, nil)
		got := "error"
		if err == nil {
			st := make([]Status, p.Limits())
			allowed, _, err := p.Decode(reply, st)
			if err != nil {
				t.Fatal(err)
			}
			got = fmt.Sprintf("%s %d", map[bool]string{true: "allowed", false: "denied"}[allowed], st[0].Remaining)
		} else if !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Errorf("request %d: error %v, want WRONGTYPE", i, err)
		}
		if got != w {
			t.Errorf("request %d = %s, want %s", i, got, w)
		}
	}
}

// TestABatchDecidesAsLoneCalls runs one sequence of requests of several
// plans and identities, some repeating the one before them but for the id,
// once in the batch form and once as lone calls, on one clock: every reply
// must agree, a key holding another type failing its own request only,
// whether the request is written whole or as a repeat. A batch runs the
// form its commands share, else the allow script.
func TestABatchDecidesAsLoneCalls(t *testing.T) {
	plans := []*Plan{
		NewPlan([]Limit{exact(4, time.Minute)}),
		NewPlan([]Limit{stepped(5, time.Minute, time.Second)}),
		NewPlan([]Limit{exact(3, time.Second), stepped(6, time.Hour, time.Minute)}),
	}
	a, b := newHarness(t), newHarness(t)
	b.log, b.now = b.log+"b", a.now
	// A hash, which neither log's commands take.
	for _, h := range []*harness{a, b} {
		if err := a.rdb.HSet(t.Context(), h.log+"wrong", "x", 1).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// commands returns the sequence's commands for h, request n of the
	// sequence taking the wrong key where bad[n].
	commands := func(h *harness, seq [][3]int, ids []string, bad map[int]bool) []Command {
		var cmds []Command
		for n, r := range seq {
			p := plans[r[0]]
			keys := h.keys(p)
			for k := range keys {
				keys[k] = strings.Replace(keys[k], "{id}", "{id}"+strconv.Itoa(r[1]), 1)
			}
			if bad[n] {
				keys[0] = h.log + "wrong"
			}
			cmds = append(cmds, p.Command(keys, r[2], ids[n], strconv.FormatInt(h.now, 10)))
		}
		return cmds
	}
	// Plan, identity, cost: runs of one plan and cost repeat, whatever the
	// identity.
	seq := [][3]int{{0, 0, 1}, {0, 1, 1}, {0, 2, 1}, {0, 0, 2}, {0, 0, 1}, {1, 0, 1}, {1, 1, 1}, {1, 1, 1},
		{2, 0, 1}, {2, 1, 1}, {0, 0, 1}, {0, 1, 1}, {1, 2, 3}, {1, 2, 3}, {1, 2, 3}, {1, 0, 1}}
	bad := map[int]bool{1: true, 5: true, 7: true} // whole, whole before repeats, a repeat
	for round := range 3 {
		ids := make([]string, len(seq))
		for n := range ids {
			ids[n] = newID()
		}
		ids[7] = ids[6] // a retry within the batch
		cmds := commands(a, seq, ids, bad)
		for n, c := range cmds {
			for _, arg := range c {
				switch arg.(type) {
				case string, int, int64:
				default:
					// repeats compares them with !=.
					t.Fatalf("request %d's command holds %T", n, arg)
				}
			}
		}
		args := Batch(cmds, false)
		repeats := 0
		for _, arg := range args {
			if arg == repeatArg {
				repeats++
			}
		}
		if repeats < 6 {
			t.Fatalf("the batch writes %d requests as repeats, want at least 6", repeats)
		}
		if args[1] != allowHashArg {
			t.Fatalf("a batch of several forms runs %v, want the allow script", args[1])
		}
		// By EVAL, every command's keys checked.
		args = Batch(cmds, true)
		args[1] = strictSource
		replies, err := a.rdb.Do(t.Context(), args...).Slice()
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for n, c := range commands(b, seq, ids, bad) {
			lone, lerr := Reply(c.Script().Run(t.Context(), b.rdb, c.Keys(), c.Args()...).Result())
			got, gerr := BatchReply(replies, n, nil)
			if (lerr != nil) != (gerr != nil) || fmt.Sprint(lone) != fmt.Sprint(got) {
				t.Fatalf("round %d, request %d: the batch answers %v %v, a lone call %v %v", round, n, got, gerr, lone, lerr)
			}
			if bad[n] && (gerr == nil || !strings.Contains(gerr.Error(), "WRONGTYPE")) {
				t.Fatalf("round %d, request %d: %v, want WRONGTYPE", round, n, gerr)
			}
		}
		a.now += 700_000
		b.now += 700_000
	}
	// A batch of one form runs that form, by EVALSHA and by EVAL.
	for _, p := range plans[:2] {
		cmds := []Command{p.Command(a.keys(p), 1, newID(), ""), p.Command(a.keys(p), 1, newID(), "")}
		if args := Batch(cmds, false); args[1] != p.hash || len(args) != 3+2*cmds[0].NKeys()+1+len(cmds[0].Args())+1+2 {
			t.Errorf("a batch of form %v runs %v in %d arguments", p.hash, args[1], len(args))
		}
		if args := Batch(cmds, true); args[1] != sources[formOf(p.hash)] {
			t.Errorf("a batch of form %v sends another source by EVAL", p.hash)
		}
	}
}

// TestExactLogKeepsAboutItsLargestQuota: a window of one limit no longer
// makes the log keep every unit another limit admits within it. The log
// keeps whole requests, at least the largest quota counted in it and fewer
// than that and its oldest request.
func TestExactLogKeepsAboutItsLargestQuota(t *testing.T) {
	h := newHarness(t)
	long := NewPlan([]Limit{exact(600, time.Minute)})
	short := NewPlan([]Limit{exact(5, time.Second)})
	for range 10 {
		h.now++
		h.decide(long, 1, newID())
	}
	h.now++
	h.decide(long, 586, newID())
	h.now += time.Second.Microseconds()
	for range 40 { // 10 s, 4 a second: the short limit admits each
		h.now += 250_000
		if ok, _, _ := h.decide(short, 1, newID()); !ok {
			t.Fatal("the short limit denied its fourth call in a second")
		}
	}
	// 636 admitted: the ten of 1 dropped, the one of 586 kept.
	if n := h.units(); n != 626 {
		t.Fatalf("the log holds %d units, want 626: 636 less the ten oldest requests of 1 unit", n)
	}
	if n := h.rdb.ZCount(t.Context(), h.log, "-2", "-2").Val(); n != 1 {
		t.Fatalf("the log holds %d records of what it dropped, want 1", n)
	}
	// Still exact for the long limit: its window holds 600 or more.
	if ok, _, st := h.decide(long, 1, newID()); ok || st[0].Remaining != 0 {
		t.Fatalf("the long limit admitted with %+v over a full window", st)
	}
}

// TestATrimmedWindowCountsFullAfterARefund: once the log dropped units to
// keep its bound, a window that reaches back to them counts as full, so a
// refund of a newer unit never lets it count too few.
func TestATrimmedWindowCountsFullAfterARefund(t *testing.T) {
	h := newHarness(t)
	day := NewPlan([]Limit{exact(10, 24*time.Hour)})
	burst := NewPlan([]Limit{exact(5, time.Second)})
	h.decide(day, 1, newID()) // the log now keeps a day and 10 units
	var last string
	for range 20 {
		h.now += 250_000
		last = newID()
		h.decide(burst, 1, last)
	}
	if n := h.units(); n != 10 {
		t.Fatalf("the log holds %d units, want its bound of 10", n)
	}
	if h.refund(burst, 1, last) != 1 {
		t.Fatal("the refund removed nothing")
	}
	ok, _, st := h.decide(day, 1, newID())
	if ok || st[0].Remaining != 0 || st[0].RetryAfter <= 0 {
		t.Fatalf("the day limit after 21 admissions and one refund = allowed %v, %+v; want denied", ok, st[0])
	}
}

// TestAnEvictionIsKeptWhateverTheDecision: a stepped decision that evicts
// the buckets that left the history its log keeps writes the log's header
// whether it admits the request (with the admission's header), denies it or
// only peeks; a header left behind would count the evicted units again,
// for their ring slots are zeroed, and deny what the limit admits.
func TestAnEvictionIsKeptWhateverTheDecision(t *testing.T) {
	p := NewPlan([]Limit{stepped(2, time.Second, 100*time.Millisecond)})
	for _, then := range []struct {
		name string
		cost int
		id   string
		ok   bool
	}{{"denied", 2, newID(), false}, {"peek", 1, "", true}, {"admitted", 1, newID(), true}} {
		t.Run(then.name, func(t *testing.T) {
			h := newHarness(t)
			h.now -= h.now % 100_000 // at the start of a step
			if ok, _, _ := h.decide(p, 1, newID()); !ok {
				t.Fatal("the first unit was denied")
			}
			h.now += 500_000
			if ok, _, _ := h.decide(p, 1, newID()); !ok {
				t.Fatal("the second unit was denied")
			}
			// The first unit's bucket has left the window, a step after it.
			h.now += 600_000
			if ok, _, st := h.decide(p, then.cost, then.id); ok != then.ok {
				t.Fatalf("the decision that evicts: %v %+v, want %v", ok, st, then.ok)
			}
			h.now += 50_000
			want := 0 // the second unit, and the one admitted before
			if then.name != "admitted" {
				want = 1
			}
			ok, _, st := h.decide(p, 1, "")
			if ok != (want > 0) || st[0].Remaining != want {
				t.Fatalf("a peek after it: %v, %d left, want %d left", ok, st[0].Remaining, want)
			}
		})
	}
}

// TestSteppedIDsAreKeptByTime: a stepped log keeps its ids for the shorter
// of its window and 15 minutes, whatever the identity admits meanwhile.
// 3,000 admissions in one step of a day's limit, then 14 minutes later,
// each is recognised when retried and gives back its unit when refunded
// (once); past the horizon and its sixteenth, the ids are swept, and a
// retry is a new request. Under a minute's limit, the horizon is the
// minute.
func TestSteppedIDsAreKeptByTime(t *testing.T) {
	h := newHarness(t)
	p := NewPlan([]Limit{stepped(100_000, 24*time.Hour, time.Minute)})
	var ids []string
	for range 3000 {
		id := newID()
		if ok, _, _ := h.decide(p, 1, id); !ok {
			t.Fatal("denied under a quota of 100,000")
		}
		ids = append(ids, id)
	}
	h.now += (14 * time.Minute).Microseconds()
	for i, id := range ids[:1000] {
		if ok, dup, st := h.decide(p, 1, id); !ok || !dup || st[0].Remaining != 100_000-3000 {
			t.Fatalf("retry of admission %d 14 minutes later = allowed %v, retried %v, %+v; want a retry counted once", i, ok, dup, st[0])
		}
	}
	for i, id := range ids[1000:2000] {
		if n := h.refund(p, 1, id); n != 1 {
			t.Fatalf("refund of admission %d gave back %d, want 1", 1000+i, n)
		}
		if n := h.refund(p, 1, id); n != 0 {
			t.Fatalf("a second refund of admission %d gave back %d, want 0", 1000+i, n)
		}
	}
	_, _, st := h.decide(p, 1, "")
	if want := 100_000 - 2000; st[0].Remaining != want {
		t.Fatalf("after 1,000 refunds Remaining = %d, want %d", st[0].Remaining, want)
	}
	// Past 15 minutes and a sixteenth: admissions sweep 64 old ids each.
	h.now += (3 * time.Minute).Microseconds()
	for range 40 {
		h.decide(p, 1, newID())
	}
	n, err := h.rdb.ZCard(t.Context(), keysOf(h.log, p)[1]).Result()
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(1 + 40); n != want {
		t.Fatalf("the ids hold %d members after the sweep, want %d (the 40 new ids and the set's own)", n, want)
	}
	if _, dup, _ := h.decide(p, 1, ids[2500]); dup {
		t.Fatal("an admission of 17 minutes ago was recognised; the horizon is 15 minutes")
	}

	h = newHarness(t)
	p = NewPlan([]Limit{stepped(1000, time.Minute, time.Second)})
	id := newID()
	h.decide(p, 1, id)
	h.now += (50 * time.Second).Microseconds()
	if _, dup, _ := h.decide(p, 1, id); !dup {
		t.Fatal("a retry 50 s later was a new request under a minute's limit")
	}
	h.now += (15 * time.Second).Microseconds()
	h.decide(p, 1, newID()) // sweeps
	if _, dup, _ := h.decide(p, 1, id); dup {
		t.Fatal("a retry 65 s later was recognised; a minute's limit keeps its ids a minute")
	}
}

// TestRetriesAreFoundWhateverCameSince: after every admission of 300, the
// ids of the newest ten, of the 128th newest and of the first are each
// recognised when retried, alone and as a part of a request of several;
// a retry records nothing.
func TestRetriesAreFoundWhateverCameSince(t *testing.T) {
	for _, limits := range [][]Limit{
		{stepped(100_000, 24*time.Hour, time.Minute)},
		{exact(100_000, time.Hour), stepped(100_000, 24*time.Hour, time.Minute)},
	} {
		h := newHarness(t)
		p := NewPlan(limits)
		last := len(limits) - 1
		var ids []string
		for i := range 300 {
			id := newID()
			if ok, dup, _ := h.decide(p, 1, id); !ok || dup {
				t.Fatalf("%d limits: admission %d = allowed %v, retried %v; want a fresh admission", len(limits), i, ok, dup)
			}
			ids = append(ids, id)
			for _, back := range []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 127, i} {
				if back > i {
					continue
				}
				if ok, dup, st := h.decide(p, 1, ids[i-back]); !ok || !dup || st[last].Remaining != 100_000-i-1 {
					t.Fatalf("%d limits: after admission %d, a retry of admission %d = allowed %v, retried %v, %+v; want a retry counted once, %d left",
						len(limits), i, i-back, ok, dup, st[last], 100_000-i-1)
				}
			}
		}
	}
}

// TestIDsSharingTheirEnds: ids that share their last bytes, or that the
// others' straddle, or of other lengths, are each a fresh request the first
// time and a retried call the second, alone and as a part of a request of
// several.
func TestIDsSharingTheirEnds(t *testing.T) {
	for _, limits := range [][]Limit{
		{stepped(1000, time.Hour, time.Minute)},
		{exact(1000, time.Hour), stepped(1000, 2*time.Hour, time.Minute)},
	} {
		h := newHarness(t)
		p := NewPlan(limits)
		last := len(limits) - 1
		// "XY" twice, then "YX", which the first two straddle, and one
		// id of one byte, then one of two equal to the others' ends.
		ids := []string{"aaaaaaXY", "bbbbbbXY", "ccccccYX", "Y", "XY"}
		for i, id := range ids {
			ok, dup, st := h.decide(p, 1, id)
			if want := 1000 - i - 1; !ok || dup || st[last].Remaining != want {
				t.Fatalf("%d limits: first call of %q = allowed %v, retried %v, %+v; want a fresh admission, %d remaining", len(limits), id, ok, dup, st[last], want)
			}
		}
		for _, id := range ids {
			ok, dup, st := h.decide(p, 1, id)
			if want := 1000 - len(ids); !ok || !dup || st[last].Remaining != want {
				t.Fatalf("%d limits: retry of %q = allowed %v, retried %v, %+v; want counted once, %d remaining", len(limits), id, ok, dup, st[last], want)
			}
		}
		if ok, dup, _ := h.decide(p, 1, "ddddddXY"); !ok || dup {
			t.Fatalf("%d limits: a fresh id ending as others do = allowed %v, retried %v; want a fresh admission", len(limits), ok, dup)
		}
	}
}

// TestARetryCountsOnceInEveryPart: a retried id is found in any part, so a
// stepped limit does not count it again once the exact log let it go.
func TestARetryCountsOnceInEveryPart(t *testing.T) {
	h := newHarness(t)
	p := NewPlan([]Limit{exact(3, time.Second), stepped(100_000, 24*time.Hour, time.Minute)})
	id := newID()
	h.decide(p, 1, id)
	h.now += 2 * time.Second.Microseconds()
	ok, dup, st := h.decide(p, 1, id)
	if !ok || !dup || st[1].Remaining != 100_000-1 {
		t.Fatalf("retry after the exact window = allowed %v, retried %v, %+v; want counted once", ok, dup, st)
	}
}

// TestChunksBoundTheWork: a batch goes in chunks of at most maxWork, in
// order, and a command heavier than that alone.
func TestChunksBoundTheWork(t *testing.T) {
	light := NewPlan([]Limit{exact(10, time.Second)}).Command([]string{"k"}, 1, "i", "")
	heavy := NewPlan([]Limit{exact(1000, time.Second)}).Command([]string{"k"}, 1000, "i", "")
	var cmds []Command
	for range 100 {
		cmds = append(cmds, light)
	}
	cmds = append(cmds, heavy, light)
	total := 0
	for _, chunk := range Chunks(cmds) {
		work := 0
		for _, c := range chunk {
			work += c.Work()
		}
		if work > maxWork && len(chunk) > 1 {
			t.Errorf("a chunk of %d commands carries %d work, more than %d", len(chunk), work, maxWork)
		}
		total += len(chunk)
	}
	if total != len(cmds) {
		t.Errorf("chunks hold %d commands, want %d", total, len(cmds))
	}
}

// TestChunksBoundTheArguments: a batch of plans with many limits goes in
// chunks whose command stays below the 3,999 arguments ElastiCache
// Serverless accepts, and each chunk is the batch form of its commands.
func TestChunksBoundTheArguments(t *testing.T) {
	limits := make([]Limit, 100)
	for i := range limits {
		limits[i] = exact(1000+i, time.Duration(i+1)*time.Second)
	}
	wide := NewPlan(limits).Command([]string{"k"}, 1, "i", "")
	cmds := make([]Command, 128)
	for i := range cmds {
		cmds[i] = wide
	}
	total := 0
	for _, chunk := range Chunks(cmds) {
		if n := len(Batch(chunk, false)); n >= 3_999 && len(chunk) > 1 {
			t.Errorf("a chunk of %d commands is a call of %d arguments, want fewer than 3,999", len(chunk), n)
		}
		total += len(chunk)
	}
	if total != len(cmds) {
		t.Errorf("chunks hold %d commands, want %d", total, len(cmds))
	}
}

// TestEveryFormDecidesAsTheAllowScript runs one sequence of decisions
// (admissions of several costs, retries with the same id, peeks, denials,
// time moving past windows) under each plan the exact and the stepped
// forms take, once through that form and once through the allow script
// that decides any plan, each on keys of its own: every reply and every
// key's content must agree.
func TestEveryFormDecidesAsTheAllowScript(t *testing.T) {
	plans := map[string]*Plan{
		"exact":            NewPlan([]Limit{exact(5, time.Second)}),
		"exact, three":     NewPlan([]Limit{exact(5, time.Second), exact(8, 3*time.Second), {Quota: 2, Window: time.Second.Microseconds(), Shadow: true}}),
		"exact, requests":  NewPlan([]Limit{{Quota: 4, Window: time.Second.Microseconds(), Requests: true}}),
		"stepped":          NewPlan([]Limit{stepped(6, 2*time.Second, 100*time.Millisecond)}),
		"stepped, two":     NewPlan([]Limit{stepped(6, 2*time.Second, 100*time.Millisecond), stepped(3, 500*time.Millisecond, 100*time.Millisecond)}),
		"stepped, shadow":  NewPlan([]Limit{stepped(6, 2*time.Second, 100*time.Millisecond), {Quota: 2, Window: time.Second.Microseconds(), Step: 100_000, Shadow: true}}),
		"stepped, several": NewPlan([]Limit{exact(5, time.Second), stepped(6, 2*time.Second, 100*time.Millisecond)}),
	}
	forms := map[any]string{exactHashArg: exactSource, steppedHashArg: steppedSource, allowHashArg: allowSource}
	for name, p := range plans {
		t.Run(name, func(t *testing.T) {
			form := redis.NewScript(strings.Replace(forms[p.hash], "local call = redis.call\n", strictPrelude, 1))
			if name == "stepped, several" && p.hash != allowHashArg || name != "stepped, several" && p.hash == allowHashArg {
				t.Fatalf("plan %s takes the form %v", name, p.hash)
			}
			a, b := newHarness(t), newHarness(t)
			a.script, b.log, b.now = form, b.log+"b", a.now
			ids := []string{newID(), newID(), newID()}
			for i := range 60 {
				cost := 1 + i%3
				id := ids[i%len(ids)]
				if i%4 == 3 {
					id = newID()
				}
				if i%7 == 6 {
					id = "" // a peek
				}
				if i%5 == 0 {
					ids[i%len(ids)] = newID()
				}
				ga, da, sa := a.decide(p, cost, id)
				gb, db, sb := b.decide(p, cost, id)
				if ga != gb || da != db || fmt.Sprint(sa) != fmt.Sprint(sb) {
					t.Fatalf("decision %d (cost %d): the form answers %v %v %v, the allow script %v %v %v", i, cost, ga, da, sa, gb, db, sb)
				}
				step := int64(90_000)
				if i%20 == 19 {
					step = 1_100_000
				}
				a.now += step
				b.now += step
			}
			for k, ka := range a.keys(p) {
				kb := b.keys(p)[k]
				ca, err := a.rdb.Dump(t.Context(), ka).Result()
				if err != nil {
					t.Fatal(err)
				}
				cb, err := b.rdb.Dump(t.Context(), kb).Result()
				if err != nil {
					t.Fatal(err)
				}
				if ca != cb {
					t.Fatalf("key %d holds other content under the form than under the allow script", k)
				}
			}
		})
	}
}

// TestACommandCarriesItsForm: a plan's command runs, by EVALSHA and by
// EVAL after NOSCRIPT, the form of the allow script its plan takes.
func TestACommandCarriesItsForm(t *testing.T) {
	for _, c := range []struct {
		limits []Limit
		script *redis.Script
		source string
	}{
		{[]Limit{exact(5, time.Second), exact(9, time.Minute)}, Exact, exactSource},
		{[]Limit{stepped(5, time.Hour, time.Minute), stepped(9, 2*time.Hour, time.Minute)}, Stepped, steppedSource},
		{[]Limit{exact(5, time.Second), stepped(9, time.Hour, time.Minute)}, Allow, allowSource},
		{[]Limit{stepped(5, time.Hour, time.Minute), stepped(9, time.Hour, 2*time.Minute)}, Allow, allowSource},
		{[]Limit{{Quota: 2, Window: time.Second.Microseconds(), InFlight: true}}, Allow, allowSource},
	} {
		p := NewPlan(c.limits)
		keys := make([]string, len(p.Parts()))
		for i := range keys {
			keys[i] = fmt.Sprintf("{k}:%d", i)
		}
		cmd := p.Command(keys, 1, "id", "")
		if cmd.Script() != c.script || cmd[1] != c.script.Hash() {
			t.Errorf("%v: the command runs %s, want %s", c.limits, cmd[1], c.script.Hash())
		}
		if eval := cmd.Eval(); eval[0] != "eval" || eval[1] != c.source {
			t.Errorf("%v: the command's EVAL sends another source", c.limits)
		}
	}
}

// TestTheShortReplyDecodesAsTheFullOne runs one sequence of decisions of
// one-limit plans, lone and in the batch form, through the allow script and
// through a copy that never gives the short reply, on a caller's clock:
// the decoded decisions must agree, and both kinds of reply must occur.
func TestTheShortReplyDecodesAsTheFullOne(t *testing.T) {
	const gate = "if allowed and not duplicate and nlim == 1 and"
	if strings.Count(allowSource, gate) != 2 {
		t.Fatalf("the allow script no longer gives the short reply where this test expects: %q", gate)
	}
	full := redis.NewScript(strings.ReplaceAll(allowSource, gate, "if false and"))
	for name, p := range map[string]*Plan{
		"exact":   NewPlan([]Limit{exact(3, time.Second)}),
		"stepped": NewPlan([]Limit{stepped(3, time.Second, 100*time.Millisecond)}),
		"shadow":  NewPlan([]Limit{{Quota: 2, Window: time.Second.Microseconds(), Shadow: true}}),
	} {
		t.Run(name, func(t *testing.T) {
			a, b := newHarness(t), newHarness(t)
			b.log += "b"
			kinds := map[int]int{}
			decode := func(reply []int64) string {
				st := make([]Status, p.Limits())
				allowed, duplicate, err := p.Decode(reply, st)
				if err != nil {
					t.Fatal(err)
				}
				return fmt.Sprint(allowed, duplicate, st)
			}
			id := newID()
			for i := range 40 {
				if i%3 != 2 {
					id = newID() // else a retry
				}
				// One clock for both scripts, the caller's: Redis TIME would
				// move between them.
				clock := strconv.FormatInt(a.now, 10)
				a.now += 90_000
				if i%10 == 9 {
					a.now += time.Second.Microseconds()
				}
				ca, cb := p.Command(a.keys(p), 1, id, clock), p.Command(b.keys(p), 1, id, clock)
				ra, err := Reply(Allow.Run(t.Context(), a.rdb, ca.Keys(), ca.Args()...).Result())
				if err != nil {
					t.Fatal(err)
				}
				rb, err := Reply(full.Run(t.Context(), b.rdb, cb.Keys(), cb.Args()...).Result())
				if err != nil {
					t.Fatal(err)
				}
				if len(rb) == 1 {
					t.Fatalf("decision %d: the copy gave a short reply", i)
				}
				if da, db := decode(ra), decode(rb); da != db {
					t.Fatalf("decision %d: the reply %v decodes to %s, the full one %v to %s", i, ra, da, rb, db)
				}
				kinds[len(ra)]++
				// The batch form, on keys of its own.
				cmd := p.Command(keysOf(a.log+"batch", p), 1, id, clock)
				replies, err := a.rdb.Do(t.Context(), Batch([]Command{cmd, cmd}, true)...).Slice()
				if err != nil {
					t.Fatal(err)
				}
				for j := range 2 {
					r, err := BatchReply(replies, j, nil)
					if err != nil {
						t.Fatal(err)
					}
					decode(r)
					kinds[len(r)]++
				}
			}
			// A shadow limit over its quota still admits, with a retry:
			// its replies past the second are full ones.
			if name != "shadow" && (kinds[1] == 0 || kinds[5] == 0) {
				t.Errorf("replies of %d integers: %v; want both short and full ones", p.Limits(), kinds)
			}
		})
	}
}

// TestAShortReplyIsDecodedOnlyForOneLimit: a plan of several limits, or an
// in-flight one, refuses a reply of one integer rather than guess.
func TestAShortReplyIsDecodedOnlyForOneLimit(t *testing.T) {
	for _, limits := range [][]Limit{
		{exact(5, time.Second), exact(9, time.Minute)},
		{{Quota: 2, Window: time.Second.Microseconds(), InFlight: true}},
	} {
		p := NewPlan(limits)
		if _, _, err := p.Decode([]int64{4}, make([]Status, p.Limits())); err == nil {
			t.Errorf("a plan of %v decodes a short reply", limits)
		}
	}
	p := NewPlan([]Limit{exact(5, time.Second)})
	st := make([]Status, 1)
	allowed, duplicate, err := p.Decode([]int64{4}, st)
	if err != nil || !allowed || duplicate || st[0] != (Status{Remaining: 4, ResetAfter: time.Second.Microseconds()}) {
		t.Errorf("the short reply 4 decodes to %v %v %+v %v", allowed, duplicate, st[0], err)
	}
	// A stepped limit's: the µs beyond a window above bit 20.
	p = NewPlan([]Limit{stepped(1_000_000, time.Hour, time.Minute)})
	allowed, duplicate, err = p.Decode([]int64{59_999_999<<20 | 999_999}, st)
	if want := (Status{Remaining: 999_999, ResetAfter: time.Hour.Microseconds() + 59_999_999}); err != nil || !allowed || duplicate || st[0] != want {
		t.Errorf("a stepped short reply decodes to %v %v %+v %v; want %+v", allowed, duplicate, st[0], err, want)
	}
	if _, _, err := p.Decode([]int64{-1}, st); err == nil {
		t.Error("a negative short reply decodes")
	}
}

// TestTheNewestBucketCountsInTheHeader walks one stepped log of two limits
// through admissions, a bucket's flush to its slot, refunds and settles of
// the newest bucket and of older ones, units moved later into, onto and
// past the newest bucket, and its eviction. After each step it checks
// every limit's status, from a peek and from requests over the limits,
// against the log's buckets as the test keeps them, and that the log holds
// them where stepped.lua says: the newest bucket's count in the header's
// p, the other buckets of o..n in their slots.
func TestTheNewestBucketCountsInTheHeader(t *testing.T) {
	const step, ring, ring0 = int64(1_000_000), 1444, 60
	limits := []Limit{stepped(20, 4*time.Second, time.Second), stepped(9, 2*time.Second, time.Second)}
	p := NewPlan(limits)
	h := newHarness(t)
	start := h.now - h.now%step + step
	b0 := start / step
	at := func(d time.Duration) { h.now = start + d.Microseconds() }
	// The log as the test keeps it: each bucket's units, and the newest
	// bucket, which a refund does not move back.
	buckets := map[int64]int64{}
	var newest int64
	total := func() (sum int64) {
		for _, u := range buckets {
			sum += u
		}
		return sum
	}
	check := func(what string) {
		t.Helper()
		for _, cost := range []int{1, 5, 15} {
			_, _, st := h.decide(p, cost, "")
			for i, l := range limits {
				from := (h.now - l.Window) / step // a limit counts the buckets from now - w's
				var c int64
				for b, u := range buckets {
					if b >= from {
						c += u
					}
				}
				want := Status{Remaining: int(max(int64(l.Quota)-c, 0))}
				if k := c + int64(cost) - int64(l.Quota); k > 0 {
					for b := from; b <= newest; b++ {
						if k -= buckets[b]; k <= 0 {
							want.RetryAfter = (b+1)*step + l.Window - h.now
							break
						}
					}
				}
				if c > 0 {
					want.ResetAfter = max((newest+1)*step+l.Window-h.now, 0)
				}
				if st[i] != want {
					t.Fatalf("%s: limit %d, cost %d: %+v, want %+v (buckets %v, b0 %d)", what, i, cost, st[i], want, buckets, b0)
				}
			}
		}
		raw, err := h.rdb.Get(t.Context(), h.keys(p)[0]).Bytes()
		if err != nil {
			t.Fatal(err)
		}
		hdr := func(i int) int64 { return int64(math.Float64frombits(binary.LittleEndian.Uint64(raw[8*i:]))) }
		o, n, tt, pn := hdr(0), hdr(1), hdr(2), hdr(6)
		if tt != total() || tt > 0 && (n != newest || pn != buckets[n]) || tt == 0 && pn != 0 {
			t.Fatalf("%s: header n b0%+d, t %d, p %d; want n b0%+d, t %d, p %d", what, n-b0, tt, pn, newest-b0, total(), buckets[newest])
		}
		for b := o; b < n && tt > 0; b++ {
			at := ring0 + 6*(b%ring) // 48-bit counts
			if got := int64(binary.BigEndian.Uint16(raw[at:]))<<32 | int64(binary.BigEndian.Uint32(raw[at+2:])); got != buckets[b] {
				t.Fatalf("%s: bucket b0%+d's slot holds %d, want %d (o b0%+d, n b0%+d, buckets %v)", what, b-b0, got, buckets[b], o-b0, n-b0, buckets)
			}
		}
	}
	admit := func(cost int) string {
		t.Helper()
		id := newID()
		if ok, _, st := h.decide(p, cost, id); !ok {
			t.Fatalf("an admission of %d was denied: %+v", cost, st)
		}
		bk := h.now / step
		if total() == 0 {
			newest = bk
		}
		newest = max(newest, bk)
		buckets[newest] += int64(cost)
		return id
	}
	// settle settles id, recorded in bucket from, to cost (below 0: kept),
	// its units later by shift.
	settle := func(id string, recorded, cost int, shift int64, from int64) {
		t.Helper()
		args := p.SettleArgs(id, h.now, h.costs[id], recorded, recorded, cost, "", strconv.FormatInt(h.now, 10), shift)
		if _, err := strictSettle.Run(t.Context(), h.rdb, h.keys(p), args...).Int64Slice(); err != nil {
			t.Fatalf("settle: %v", err)
		}
		if cost < 0 {
			cost = recorded
		}
		to := from + (shift+step-1)/step
		buckets[from] -= int64(recorded)
		buckets[to] += int64(cost)
		newest = max(newest, to)
	}

	at(100 * time.Millisecond)
	a := admit(2)
	at(500 * time.Millisecond)
	bq := admit(1)
	check("two admissions to b0")
	at(1200 * time.Millisecond)
	c := admit(1)
	check("b0 flushed, b0+1 the newest")
	settle(bq, 1, 0, 0, b0)
	check("a refund in b0")
	settle(c, 1, 3, 0, b0+1)
	check("a settle up in the newest bucket")
	settle(c, 3, 2, 0, b0+1)
	check("a settle down in the newest bucket")
	settle(a, 2, -1, 2*step, b0)
	check("units moved past the newest bucket")
	at(2300 * time.Millisecond)
	d := admit(3)
	check("an admission to the newest bucket")
	settle(c, 2, -1, step, b0+1)
	check("units moved onto the newest bucket")
	settle(d, 3, -1, step, b0+2)
	check("units moved from the newest bucket past it")
	settle(d, 3, 0, 0, b0+3)
	check("the newest bucket refunded")
	at(3500 * time.Millisecond)
	admit(1)
	check("an admission after the newest bucket was refunded")
	at(6200 * time.Millisecond) // b0 and b0+1 leave the 4 s the log keeps
	delete(buckets, b0)
	delete(buckets, b0+1)
	admit(1)
	check("an admission that evicts")
	at(12 * time.Second) // all of it leaves
	buckets = map[int64]int64{}
	admit(2)
	check("an admission after the whole log left")
}

// TestAShiftBeyondNowStaysInTheRing: Shift moves a stepped request's units
// to no later than the step after now's. A request moved past now, and
// another moved to a bucket a ring's length after a bucket still kept,
// shared that bucket's slot: the eviction of the old bucket took the
// moved unit with it, and the log counted one unit of two.
func TestAShiftBeyondNowStaysInTheRing(t *testing.T) {
	const step = int64(1000)
	p := NewPlan([]Limit{stepped(2, 1440*time.Millisecond, time.Millisecond)})
	h := newHarness(t)
	start := h.now - h.now%step + step
	at := func(ms int64) { h.now = start + ms*step }
	shift := func(id string, ms int64) {
		t.Helper()
		args := p.SettleArgs(id, h.now, 1, 1, 1, -1, LeaseKeep, strconv.FormatInt(h.now, 10), ms*step)
		if _, err := strictSettle.Run(t.Context(), h.rdb, h.keys(p), args...).Int64Slice(); err != nil {
			t.Fatalf("shift: %v", err)
		}
	}
	a, b := newID(), newID()
	at(0)
	if ok, _, _ := h.decide(p, 1, a); !ok {
		t.Fatal("a was denied")
	}
	at(10)
	if ok, _, _ := h.decide(p, 1, b); !ok {
		t.Fatal("b was denied")
	}
	at(20)
	shift(b, 2000)
	at(30)
	shift(a, 1444)
	at(1441) // a's first bucket leaves the window; a and b stay in it
	if ok, _, st := h.decide(p, 1, ""); ok || st[0].Remaining != 0 {
		t.Fatalf("a peek after the shifts: allowed %v, %+v; want denied, 0 left", ok, st[0])
	}
}

// TestASlotIsWrittenAsItsBucketEnters: an eviction leaves the slots it
// frees as they are, so a bucket a ring's length later finds its slot
// holding a count long gone; the bucket that becomes the newest past it
// zeroes it. Here a short window counts that bucket's slot, which held 5,
// and the slots written run past the ring's end to its start.
func TestASlotIsWrittenAsItsBucketEnters(t *testing.T) {
	const step, ring = int64(1000), 1444
	p := NewPlan([]Limit{stepped(100, 1440*time.Millisecond, time.Millisecond), stepped(100, 10*time.Millisecond, time.Millisecond)})
	h := newHarness(t)
	start := h.now - h.now%step + step
	start += ((1 - start/step%ring + ring) % ring) * step // bucket 0 in slot 1, bucket 1,442 in the last
	admit := func(ms int64, cost int) {
		t.Helper()
		h.now = start + ms*step
		if ok, _, st := h.decide(p, cost, newID()); !ok {
			t.Fatalf("an admission of %d at %d ms was denied: %+v", cost, ms, st)
		}
	}
	admit(0, 5)
	admit(1, 1)    // bucket 0's 5 goes to its slot
	admit(1442, 1) // buckets 0 and 1 leave; slot 1 keeps its 5
	admit(1446, 1) // bucket 1,444, in slot 1, is between the newest two
	_, _, st := h.decide(p, 1, "")
	if st[0].Remaining != 98 || st[1].Remaining != 98 {
		t.Fatalf("after admissions at 1,442 and 1,446 ms: %+v, want 98 left of each limit", st)
	}
}
