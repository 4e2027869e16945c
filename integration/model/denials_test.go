package model

import (
	"fmt"
	"strings"
	"sync"
	"time"

	slidelimit "github.com/slidelimit/slidelimit/core"
)

// denialLog is what the checker knows of each limiter's deny cache: every
// denial Redis gave it that the cache may keep (WithDenyCache: "until the
// denial's RetryAfter has passed"; not one by a limit in flight), read from
// the limiter's Observer, so that the denials a Wait's queue met are in it
// too. A cached answer must be one of them, counted down to its time; and
// a limiter's cache is stale for an identity (it may deny what Redis would
// admit) from a change it cannot see until the longest RetryAfter it had
// handed out for the identity has passed.
type denialLog struct {
	mu sync.Mutex
	by []map[string][]denied // per limiter, by identity (a tree's tenant)
	// staleUntil is, per limiter and identity, when the cache stops
	// holding a denial made before a change it did not see (µs, test
	// clock); 0: not stale.
	staleUntil []map[string]int64
}

// denied is one denial Redis gave, as the deny cache keeps it.
type denied struct {
	sig   string // the limits (and levels) it was made under
	cost  int
	at    int64 // µs, test clock: when it was asked
	until int64 // at + RetryAfter
	res   slidelimit.Result
}

func newDenialLog(limiters int) *denialLog {
	d := &denialLog{}
	for range limiters {
		d.by = append(d.by, map[string][]denied{})
		d.staleUntil = append(d.staleUntil, map[string]int64{})
	}
	return d
}

// sigOf names the limits a Result was decided under, as the deny cache
// tells plans apart.
func sigOf(r slidelimit.Result) string {
	var b strings.Builder
	for _, s := range r.Statuses {
		fmt.Fprintf(&b, "%s/%s;", s.Level, limitString(s.Limit))
	}
	return b.String()
}

// note records an Observation of limiter lim made at now, if it is a
// denial from Redis the cache may keep.
func (d *denialLog) note(lim int, o slidelimit.Observation, now time.Time) {
	r := o.Result
	if o.Err != nil || r.Fallback || r.Cached || r.Allowed && !r.Shadow || r.RetryAfter <= 0 {
		return
	}
	for _, s := range r.Statuses {
		if s.Limit.InFlight && !s.Limit.Shadow && s.RetryAfter > 0 {
			return // "a denial by an in-flight limit is not remembered"
		}
	}
	raw := r
	raw.Allowed, raw.Shadow = false, false
	at := now.UnixMicro()
	d.mu.Lock()
	defer d.mu.Unlock()
	kept := d.by[lim][o.Identity][:0:0]
	for _, x := range d.by[lim][o.Identity] {
		if x.until > at {
			kept = append(kept, x)
		}
	}
	d.by[lim][o.Identity] = append(kept, denied{sig: sigOf(raw), cost: o.Cost, at: at, until: at + r.RetryAfter.Microseconds(), res: raw})
}

// answers returns why raw, a cached denial limiter lim gave who for a cost
// at now, is not one of the denials Redis gave it counted down to now
// ("" if it is one).
func (d *denialLog) answers(lim int, who string, cost int, now int64, raw slidelimit.Result) string {
	raw.Shadow = false // shadow mode's mark, set after the cache answered
	d.mu.Lock()
	defer d.mu.Unlock()
	sig := sigOf(raw)
	var near []string
	for _, x := range d.by[lim][who] {
		if x.sig != sig || x.cost > cost || x.at > now {
			continue
		}
		if now >= x.until {
			near = append(near, fmt.Sprintf("%s asked at t=%dµs, which expired at t=%dµs", resultString(x.res), x.at, x.until))
			continue
		}
		want := countDown(x, now)
		if resultString(want) == resultString(raw) {
			return ""
		}
		near = append(near, fmt.Sprintf("%s asked at t=%dµs: want %s", resultString(x.res), x.at, resultString(want)))
	}
	if len(near) == 0 {
		return "answers no denial Redis gave the limiter under these limits for a cost of at most " + fmt.Sprint(cost)
	}
	return "is no denial Redis gave the limiter, counted down to its time (WithDenyCache: until the denial's RetryAfter has passed):\n    " + strings.Join(near, "\n    ")
}

// countDown is the answer the cache gives from x at now: its times less
// what has passed.
func countDown(x denied, now int64) slidelimit.Result {
	elapsed := time.Duration(now-x.at) * time.Microsecond
	r := x.res
	r.Cached = true
	r.RetryAfter = time.Duration(x.until-now) * time.Microsecond
	r.ResetAfter = max(0, r.ResetAfter-elapsed)
	r.Statuses = make([]slidelimit.Status, len(x.res.Statuses))
	for i, s := range x.res.Statuses {
		s.RetryAfter = max(0, s.RetryAfter-elapsed)
		s.ResetAfter = max(0, s.ResetAfter-elapsed)
		r.Statuses[i] = s
	}
	return r
}

// staleFrom notes a change limiter lim's cache cannot see for who: it may
// deny what Redis would admit until every denial it holds has expired.
func (d *denialLog) staleFrom(lim int, who string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, x := range d.by[lim][who] {
		d.staleUntil[lim][who] = max(d.staleUntil[lim][who], x.until)
	}
}

// forget notes that limiter lim dropped its denials of who ("a Refund or
// Reset through this limiter clears the identity's entry").
func (d *denialLog) forget(lim int, who string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.by[lim], who)
	delete(d.staleUntil[lim], who)
}

// stale reports whether limiter lim's cache may deny who at now what Redis
// would admit.
func (d *denialLog) stale(lim int, who string, now int64) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return now < d.staleUntil[lim][who]
}
