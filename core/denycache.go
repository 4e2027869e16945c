package slidelimit

import (
	"hash/maphash"
	"sync"
	"time"
)

// DefaultDenyCacheSize is how many denied identities a Limiter remembers
// unless WithDenyCache sets another size.
const DefaultDenyCacheSize = 10_000

// denyShards is the number of independently locked parts of a denyCache.
const denyShards = 16

// denyCache remembers recent denials, so that an identity that keeps
// knocking is answered without a Redis round trip until its RetryAfter has
// passed. A denial answers only calls under the same limits (the same
// plan): per-call limits (AllowLimits) are remembered per plan, a few per
// identity. It is exact in both directions:
//
//   - It never admits: it only denies, or lets the call through to Redis.
//   - It denies only what Redis would deny. A denial recorded nothing, and
//     until its RetryAfter has passed no unit leaves any window early, so a
//     request of the same identity and at least the same cost still does not
//     fit; other processes can only add units. The expiry is counted from
//     just before the call that was denied, so it passes no later than Redis
//     reopens. The exceptions are a Refund or Reset made by another process
//     or Limiter, or a member deleted by hand: the cache may then deny for up
//     to the remaining RetryAfter longer than needed.
//   - A denial by an in-flight limit is not remembered: a release, in any
//     process, may free a place at any moment before its RetryAfter.
//
// It is safe for concurrent use; its memory is bounded by its size.
type denyCache struct {
	seed   maphash.Seed
	limit  int // entries per shard
	shards [denyShards]denyShard
}

type denyShard struct {
	mu      sync.Mutex
	entries map[string]*denials // by identity
}

// plansPerIdentity is how many plans' denials an identity keeps; a
// further plan's replaces the one that expires first.
const plansPerIdentity = 4

// denials are the remembered denials of one identity, one per plan.
type denials struct {
	n    int
	byID [plansPerIdentity]denial
}

// denial is one remembered denial.
type denial struct {
	plan  string    // the limits' signature (limitSet.sig)
	cost  int       // the denied cost: any cost at least this is denied too
	at    time.Time // the clock just before the call that was denied
	until time.Time // at + RetryAfter
	res   Result    // the denied Result, as Redis returned it
}

// newDenyCache returns a cache of about size entries, or nil for size 0.
func newDenyCache(size int) *denyCache {
	if size <= 0 {
		return nil
	}
	c := &denyCache{seed: maphash.MakeSeed(), limit: max(1, (size+denyShards-1)/denyShards)}
	for i := range c.shards {
		c.shards[i].entries = make(map[string]*denials)
	}
	return c
}

func (c *denyCache) shard(identity string) *denyShard {
	return &c.shards[maphash.String(c.seed, identity)%denyShards]
}

// lookup returns the cached denial of a request of cost n by identity
// under the plan of signature plan at time now, with its times counted
// down, if there is one.
func (c *denyCache) lookup(identity, plan string, n int, now time.Time) (Result, bool) {
	s := c.shard(identity)
	s.mu.Lock()
	var d denial
	ok := false
	if ds := s.entries[identity]; ds != nil {
		for i := 0; i < ds.n; i++ {
			if ds.byID[i].plan == plan {
				d, ok = ds.byID[i], now.Before(ds.byID[i].until)
				if !ok {
					ds.remove(i)
					if ds.n == 0 {
						delete(s.entries, identity)
					}
				}
				break
			}
		}
	}
	s.mu.Unlock()
	if !ok || n < d.cost {
		return Result{}, false
	}
	elapsed := now.Sub(d.at)
	res := d.res
	res.Cached = true
	res.RetryAfter = d.until.Sub(now)
	res.ResetAfter = max(0, res.ResetAfter-elapsed)
	res.Statuses = make([]Status, len(d.res.Statuses))
	for i, st := range d.res.Statuses {
		st.RetryAfter = max(0, st.RetryAfter-elapsed)
		st.ResetAfter = max(0, st.ResetAfter-elapsed)
		res.Statuses[i] = st
	}
	return res, true
}

// remove drops the i-th denial.
func (ds *denials) remove(i int) {
	ds.n--
	ds.byID[i] = ds.byID[ds.n]
	ds.byID[ds.n] = denial{}
}

// store remembers res, Redis's denial of a request of cost n by identity
// under the plan of signature plan, asked at time at.
func (c *denyCache) store(identity, plan string, n int, at time.Time, res Result) {
	if res.Allowed || res.Fallback || res.RetryAfter <= 0 {
		return
	}
	for _, s := range res.Statuses {
		if s.Limit.InFlight && !s.Limit.Shadow && s.RetryAfter > 0 {
			return // a release may free the place at any moment
		}
	}
	d := denial{plan: plan, cost: n, at: at, until: at.Add(res.RetryAfter)}
	s := c.shard(identity)
	s.mu.Lock()
	defer s.mu.Unlock()
	ds := s.entries[identity]
	if ds == nil {
		if len(s.entries) >= c.limit {
			c.evict(s, at)
		}
		ds = &denials{}
		s.entries[identity] = ds
	}
	slot := -1
	for i := 0; i < ds.n; i++ {
		if ds.byID[i].plan != plan {
			continue
		}
		if old := ds.byID[i]; old.cost < n && at.Before(old.until) {
			// Keep the denial that covers more costs; it is still valid.
			return
		}
		slot = i
	}
	if slot < 0 && ds.n < plansPerIdentity {
		slot = ds.n
		ds.n++
	}
	if slot < 0 {
		// Full: replace the denial that expires first.
		slot = 0
		for i := 1; i < ds.n; i++ {
			if ds.byID[i].until.Before(ds.byID[slot].until) {
				slot = i
			}
		}
	}
	// The entry keeps a copy of the Statuses, not the caller's decision.
	res.Statuses, res.d = append([]Status(nil), res.Statuses...), nil
	d.res = res
	ds.byID[slot] = d
}

// evict makes room in a full shard: it drops the identities whose
// denials have all expired among a few, or else one of them. Dropping
// costs a round trip to Redis, never exactness. s.mu is held.
func (c *denyCache) evict(s *denyShard, at time.Time) {
	var victim string
	scanned, dropped := 0, false
	for k, ds := range s.entries {
		live := false
		for i := 0; i < ds.n; i++ {
			live = live || at.Before(ds.byID[i].until)
		}
		if !live {
			delete(s.entries, k)
			dropped = true
		} else if scanned == 0 {
			victim = k
		}
		if scanned++; scanned == 32 {
			break
		}
	}
	if !dropped {
		delete(s.entries, victim)
	}
}

// forget drops identity's denials, after a Refund or Reset.
func (c *denyCache) forget(identity string) {
	s := c.shard(identity)
	s.mu.Lock()
	delete(s.entries, identity)
	s.mu.Unlock()
}
