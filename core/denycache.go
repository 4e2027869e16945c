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
// passed. It is exact in both directions:
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
//
// It is safe for concurrent use; its memory is bounded by its size.
type denyCache struct {
	seed   maphash.Seed
	limit  int // entries per shard
	shards [denyShards]denyShard
}

type denyShard struct {
	mu      sync.Mutex
	entries map[string]denial
}

// denial is one remembered denial.
type denial struct {
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
		c.shards[i].entries = make(map[string]denial)
	}
	return c
}

func (c *denyCache) shard(identity string) *denyShard {
	return &c.shards[maphash.String(c.seed, identity)%denyShards]
}

// lookup returns the cached denial of a request of cost n by identity at
// time now, with its times counted down, if there is one.
func (c *denyCache) lookup(identity string, n int, now time.Time) (Result, bool) {
	s := c.shard(identity)
	s.mu.Lock()
	d, ok := s.entries[identity]
	if ok && !now.Before(d.until) {
		delete(s.entries, identity)
		ok = false
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

// store remembers res, Redis's denial of a request of cost n by identity
// asked at time at.
func (c *denyCache) store(identity string, n int, at time.Time, res Result) {
	if res.Allowed || res.Fallback || res.RetryAfter <= 0 {
		return
	}
	d := denial{cost: n, at: at, until: at.Add(res.RetryAfter), res: res}
	s := c.shard(identity)
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.entries[identity]; ok && old.cost < n && at.Before(old.until) {
		// Keep the denial that covers more costs; it is still valid.
		return
	}
	if _, ok := s.entries[identity]; !ok && len(s.entries) >= c.limit {
		// Full: drop the expired entries among a few, or else one of them.
		// Dropping costs a round trip to Redis, never exactness.
		var victim string
		scanned, dropped := 0, false
		for k, e := range s.entries {
			if !at.Before(e.until) {
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
	// The entry keeps a copy of the Statuses, not the caller's decision.
	res.Statuses, res.d = append([]Status(nil), res.Statuses...), nil
	d.res = res
	s.entries[identity] = d
}

// forget drops identity's denial, after a Refund or Reset.
func (c *denyCache) forget(identity string) {
	s := c.shard(identity)
	s.mu.Lock()
	delete(s.entries, identity)
	s.mu.Unlock()
}
