package slidelimit

import (
	"container/list"
	"sync"
	"time"
)

// localLimits is FailLocal's in-process sliding-window log: per identity
// and limit, the admissions of the last window, against a share of each
// quota. It remembers at most capacity identities, forgetting the least
// recently seen first. It is safe for concurrent use.
type localLimits struct {
	limits   []Limit
	shares   []int // per limit: floor(quota / replicas)
	capacity int

	mu  sync.Mutex
	lru *list.List               // of *localEntry, most recently seen first
	ids map[string]*list.Element // identity → element of lru
}

// localEntry is one identity's log.
type localEntry struct {
	identity string
	logs     [][]localUnit // per limit, oldest first
}

// localUnit is one admission: its time and cost.
type localUnit struct {
	at   time.Time
	cost int
}

func newLocalLimits(limits []Limit, replicas, capacity int) *localLimits {
	l := &localLimits{limits: limits, capacity: capacity, lru: list.New(), ids: make(map[string]*list.Element)}
	for _, lim := range limits {
		l.shares = append(l.shares, lim.Quota/replicas)
	}
	return l
}

// decide admits a request of cost n by identity if every limit's share has
// n units left in its window, recording it unless peek; the Result is
// marked Fallback and carries no Statuses, like every fallback.
func (l *localLimits) decide(identity string, n int, peek bool, now time.Time) Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.entry(identity)
	allowed := true
	counts := make([]int, len(l.limits))
	for i, lim := range l.limits {
		log := e.logs[i]
		k := 0
		for k < len(log) && !log[k].at.After(now.Add(-lim.Window)) {
			k++
		}
		log = log[k:]
		e.logs[i] = log
		for _, u := range log {
			counts[i] += u.cost
		}
		if counts[i]+n > l.shares[i] {
			allowed = false
		}
	}
	if allowed && !peek {
		for i := range l.limits {
			e.logs[i] = append(e.logs[i], localUnit{at: now, cost: n})
			counts[i] += n
		}
	}

	res := Result{Allowed: allowed, Fallback: true}
	decider := -1
	for i, lim := range l.limits {
		remaining := max(l.shares[i]-counts[i], 0)
		retry := time.Duration(0)
		if !allowed && counts[i]+n > l.shares[i] {
			retry = lim.Window // a cost above the share never fits: come back after a window
			free := counts[i] + n - l.shares[i]
			for _, u := range e.logs[i] {
				if free -= u.cost; free <= 0 {
					retry = u.at.Add(lim.Window).Sub(now)
					break
				}
			}
		}
		reset := time.Duration(0)
		if log := e.logs[i]; len(log) > 0 {
			reset = log[len(log)-1].at.Add(lim.Window).Sub(now)
		}
		if decider < 0 || allowed && remaining < res.Remaining || !allowed && retry > res.RetryAfter {
			decider = i
			res.Limit, res.Remaining, res.RetryAfter, res.ResetAfter = lim, remaining, retry, reset
		}
	}
	if !allowed && res.RetryAfter <= 0 {
		res.RetryAfter = time.Millisecond
	}
	return res
}

// entry returns identity's log, making it the most recently seen and
// forgetting the least recently seen identity beyond capacity. l.mu is
// held.
func (l *localLimits) entry(identity string) *localEntry {
	if el, ok := l.ids[identity]; ok {
		l.lru.MoveToFront(el)
		return el.Value.(*localEntry)
	}
	e := &localEntry{identity: identity, logs: make([][]localUnit, len(l.limits))}
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
