package slidelimit

import (
	"container/list"
	"slices"
	"sync"
	"time"
)

// localSlots is how many entries a local log keeps per window: admissions
// closer together than its window's localSlots-th share one entry, stamped
// with the latest of them, so that the log's memory does not grow with the
// quota, and a limit counts them at most a localSlots-th of its window
// longer than they count.
const localSlots = 64

// localWindows is how many windows an identity keeps a local log of: the
// windows counted on it most lately.
const localWindows = 8

// localLimits is FailLocal's in-process log: per identity, the admissions
// of the last window of each window any call counted on it lately, which
// every call's own limits count against their shares, floor(quota /
// replicas), and the requests it holds in flight. It remembers at most
// capacity identities, forgetting the least recently seen first. It is
// safe for concurrent use.
type localLimits struct {
	replicas int
	capacity int

	mu  sync.Mutex
	lru *list.List               // of *localEntry, most recently seen first
	ids map[string]*list.Element // identity → element of lru
}

// localEntry is one identity's logs.
type localEntry struct {
	identity string
	logs     []*localLog  // one per window, most recently counted first
	leases   []localLease // in flight
}

// localLog is the admissions of one window's length, each window keeping
// its own: admissions are coalesced at a localSlots-th of the window, so
// that a short window beside a long one is counted at its own resolution,
// not the long one's.
type localLog struct {
	window time.Duration
	units  []localUnit // oldest first
}

// localUnit is the admissions of one stretch of time: their cost and
// the number of them made by calls with a limit that counts requests
// (Limit.Requests), stamped
// with the latest of them, so that they leave every window no sooner than
// each would have.
type localUnit struct {
	first, at time.Time
	cost      int
	requests  int
}

// counted is what lim counts of u: its requests or its cost.
func (u localUnit) counted(lim Limit) int {
	if lim.Requests {
		return u.requests
	}
	return u.cost
}

// localLease is a request in flight: its id and when its lease ends.
type localLease struct {
	id    string
	until time.Time
}

func newLocalLimits(replicas, capacity int) *localLimits {
	return &localLimits{replicas: replicas, capacity: capacity, lru: list.New(), ids: make(map[string]*list.Element)}
}

// decide admits a request of cost n with id ("" to peek) if every enforced
// limit of set has room in its share, the limits of level i counting the
// log of ids[i] (the Redis key stem of the level's identity, which no two
// identities share), and records it; names are the levels' names for the
// Statuses, nil for one identity. The Result is marked Fallback
// and Local and carries one Status per limit of set, like a decision Redis
// made, but counted against the shares.
func (l *localLimits) decide(ids, names []string, n int, id string, set *limitSet, now time.Time) Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	entries := make([]*localEntry, len(ids))
	for i, identity := range ids {
		entries[i] = l.entry(identity)
	}
	level := func(i int) *localEntry {
		if set.levels == nil {
			return entries[0]
		}
		return entries[set.levels[i]]
	}
	logs := make([]*localLog, len(set.limits))
	for i, lim := range set.limits {
		if !lim.InFlight {
			logs[i] = level(i).log(lim.Window)
		}
	}
	for _, e := range entries {
		e.evict(now)
	}

	counts := make([]int, len(set.limits))
	allowed := true
	for i, lim := range set.limits {
		e, need := level(i), n
		if lim.InFlight {
			counts[i], need = len(e.leases), 1
		} else {
			if lim.Requests {
				need = 1
			}
			for _, u := range logs[i].units {
				counts[i] += u.counted(lim)
			}
		}
		if counts[i]+need > l.share(lim) && !lim.Shadow {
			allowed = false
		}
	}
	if allowed && id != "" {
		// A level's requests are counted only by calls with a limit that
		// counts them there, and its units only by calls with a limit
		// that counts units there, as Redis keeps each in a log of its
		// own that only such calls write.
		units, requests := make([]bool, len(entries)), make([]bool, len(entries))
		for i, lim := range set.limits {
			at := 0
			if set.levels != nil {
				at = set.levels[i]
			}
			switch {
			case lim.InFlight:
			case lim.Requests:
				requests[at] = true
			default:
				units[at] = true
			}
		}
		for i, e := range entries {
			cost := 0
			if units[i] {
				cost = n
			}
			if cost > 0 || requests[i] {
				e.record(cost, requests[i], now)
			}
		}
		leased := make(map[*localEntry]bool, len(entries))
		for i, lim := range set.limits {
			switch {
			case lim.InFlight:
				// One place a level, as Redis's in-flight log takes: of
				// the level's lease (leaseOf).
				if e := level(i); !leased[e] {
					leased[e] = true
					e.leases = append(e.leases, localLease{id: id, until: now.Add(leaseOf(levelLimits(set, i)))})
				}
				counts[i]++
			case lim.Requests:
				counts[i]++
			default:
				counts[i] += n
			}
		}
	}

	res := Result{Allowed: allowed, Fallback: true, Local: true}
	res.Statuses = make([]Status, len(set.limits))
	decider := -1
	for i, lim := range set.limits {
		s := l.status(level(i), logs[i], lim, counts[i], n, allowed, now)
		if names != nil {
			s.Level = names[set.levels[i]]
		}
		res.Statuses[i] = s
		if lim.Shadow && decider >= 0 {
			continue
		}
		if decider < 0 || set.limits[decider].Shadow {
			decider = i
			continue
		}
		d := res.Statuses[decider]
		if allowed && s.Remaining < d.Remaining || !allowed && s.RetryAfter > d.RetryAfter {
			decider = i
		}
	}
	d := res.Statuses[decider]
	res.Limit, res.Remaining, res.RetryAfter, res.ResetAfter = d.Limit, d.Remaining, d.RetryAfter, d.ResetAfter
	if allowed && id != "" {
		res.d = new(decision)
		res.d.admitted = admission{local: &localHold{lims: l, ids: ids}, id: id}
	}
	return res
}

// status returns the Status of lim, counting count on e (in log, unless
// lim is an in-flight limit) after a decision of cost n.
func (l *localLimits) status(e *localEntry, log *localLog, lim Limit, count, n int, allowed bool, now time.Time) Status {
	share := l.share(lim)
	s := Status{Limit: lim, Remaining: max(share-count, 0)}
	if lim.InFlight {
		if !allowed && count+1 > share {
			s.RetryAfter = lim.Window
			for _, ls := range e.leases {
				s.RetryAfter = min(s.RetryAfter, max(ls.until.Sub(now), time.Millisecond))
			}
		}
		return s
	}
	if lim.Requests {
		n = 1
	}
	if !allowed && count+n > share {
		s.RetryAfter = lim.Window // a cost above the share never fits: come back after a window
		free := count + n - share
		for _, u := range log.units {
			if free -= u.counted(lim); free <= 0 {
				s.RetryAfter = max(u.at.Add(lim.Window).Sub(now), time.Millisecond)
				break
			}
		}
	}
	if last := len(log.units) - 1; last >= 0 && count > 0 {
		s.ResetAfter = max(log.units[last].at.Add(lim.Window).Sub(now), 0)
	}
	return s
}

// log returns e's log of window, making it the most recently counted. A
// window not counted lately starts with the admissions of the log of the
// shortest window at least as long (stamped no earlier than they came, so
// counted no shorter), or else of the longest, as Redis's log holds what
// the longest window counted on it kept; beyond localWindows windows, the
// least recently counted is forgotten.
func (e *localEntry) log(window time.Duration) *localLog {
	for i, lg := range e.logs {
		if lg.window == window {
			copy(e.logs[1:i+1], e.logs[:i])
			e.logs[0] = lg
			return lg
		}
	}
	var from *localLog
	for _, o := range e.logs {
		switch {
		case o.window >= window:
			if from == nil || from.window < window || o.window < from.window {
				from = o // the shortest at least as long
			}
		case from == nil || from.window < window && o.window > from.window:
			from = o // else the longest
		}
	}
	lg := &localLog{window: window}
	if from != nil {
		lg.units = slices.Clone(from.units)
	}
	e.logs = slices.Insert(e.logs, 0, lg)
	if len(e.logs) > localWindows {
		e.logs = e.logs[:localWindows]
	}
	return lg
}

// evict drops from each of e's logs what left its window, and e's ended
// leases.
func (e *localEntry) evict(now time.Time) {
	for _, lg := range e.logs {
		k := 0
		for k < len(lg.units) && !lg.units[k].at.After(now.Add(-lg.window)) {
			k++
		}
		lg.units = lg.units[k:]
	}
	held := e.leases[:0]
	for _, ls := range e.leases {
		if ls.until.After(now) {
			held = append(held, ls)
		}
	}
	e.leases = held
}

// record adds an admission of cost n (0 when the call counts no units
// on e) at now to each of e's logs, and counts it as a request if
// requests.
func (e *localEntry) record(n int, requests bool, now time.Time) {
	r := 0
	if requests {
		r = 1
	}
	for _, lg := range e.logs {
		slot := lg.window / localSlots
		if last := len(lg.units) - 1; last >= 0 && now.Sub(lg.units[last].first) < slot {
			lg.units[last].at, lg.units[last].cost = now, lg.units[last].cost+n
			lg.units[last].requests += r
			continue
		}
		lg.units = append(lg.units, localUnit{first: now, at: now, cost: n, requests: r})
	}
}

// release gives back the places in flight that the request id holds on
// the identities ids.
func (l *localLimits) release(ids []string, id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, identity := range ids {
		el, ok := l.ids[identity]
		if !ok {
			continue
		}
		e := el.Value.(*localEntry)
		held := e.leases[:0]
		for _, ls := range e.leases {
			if ls.id != id {
				held = append(held, ls)
			}
		}
		e.leases = held
	}
}

// share returns this process's share of lim's quota.
func (l *localLimits) share(lim Limit) int { return lim.Quota / l.replicas }

// entry returns identity's log, making it the most recently seen and
// forgetting the least recently seen identity beyond capacity. l.mu is
// held.
func (l *localLimits) entry(identity string) *localEntry {
	if el, ok := l.ids[identity]; ok {
		l.lru.MoveToFront(el)
		return el.Value.(*localEntry)
	}
	e := &localEntry{identity: identity}
	l.ids[identity] = l.lru.PushFront(e)
	if l.lru.Len() > l.capacity {
		oldest := l.lru.Back()
		l.lru.Remove(oldest)
		delete(l.ids, oldest.Value.(*localEntry).identity)
	}
	return e
}

// len returns how many identities l remembers.
func (l *localLimits) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lru.Len()
}

// levelLimits returns the limits of set that count the level of its i-th
// limit (all of them for one identity).
func levelLimits(set *limitSet, i int) []Limit {
	if set.levels == nil {
		return set.limits
	}
	var out []Limit
	for j, l := range set.limits {
		if set.levels[j] == set.levels[i] {
			out = append(out, l)
		}
	}
	return out
}
