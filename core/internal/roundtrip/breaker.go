package roundtrip

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// breaker is a Limiter's circuit breaker, with one circuit per Redis node
// (one in all unless the client is a ClusterClient), so that a failed shard
// never diverts the calls of healthy ones. It counts failed round trips,
// not calls: the calls of one batch share a round trip id, and a batch of a
// hundred calls that times out is one failure. It is safe for concurrent
// use; a nil *breaker is disabled.
type breaker struct {
	failures int
	cooldown time.Duration

	mu       sync.Mutex
	circuits map[string]*circuit // the nodes with failures; the others are closed
	// tracked is len(circuits), so that while every circuit is closed and
	// healthy a call reads one atomic rather than taking mu twice.
	tracked atomic.Int32
}

// circuit is the state of one node's breaker.
type circuit struct {
	fails     int                  // consecutive failed round trips
	counted   [countedTrips]uint64 // ids of the round trips last counted in fails
	next      int                  // where counted takes the next id
	openUntil time.Time            // zero while closed
	probing   bool                 // half-open: a probe is out
}

// countedTrips is how many round trips a circuit remembers having counted,
// so that the calls of one round trip count it once. Round trips in flight
// together end in any order (a node has at most maxInFlight out per
// client), and each of them counts.
const countedTrips = 2 * maxInFlight

// seen reports whether round trip rt was counted already, and remembers it
// if not.
func (c *circuit) seen(rt uint64) bool {
	for _, id := range c.counted {
		if id == rt {
			return true
		}
	}
	c.counted[c.next] = rt
	c.next = (c.next + 1) % len(c.counted)
	return false
}

func newBreaker(failures int, cooldown time.Duration) *breaker {
	if failures <= 0 {
		return nil
	}
	return &breaker{failures: failures, cooldown: cooldown, circuits: make(map[string]*circuit)}
}

// admit reports whether a call to node may go to Redis, and whether it is
// the probe of a half-open circuit. A refused call gets an error wrapping
// ErrCircuitOpen.
func (b *breaker) admit(node string) (probe bool, err error) {
	if b == nil || b.tracked.Load() == 0 {
		return false, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.circuits[node]
	if c == nil || c.openUntil.IsZero() {
		return false, nil
	}
	if time.Now().Before(c.openUntil) || c.probing {
		return false, fmt.Errorf("%w after %d failed round trips", ErrCircuitOpen, c.fails)
	}
	c.probing = true
	return true, nil
}

// record counts the outcome h of round trip rt to node; probe says whether
// the call was the circuit's probe.
func (b *breaker) record(node string, rt uint64, h health, probe bool) {
	if b == nil || h != healthFailed && !probe && b.tracked.Load() == 0 {
		return // closed and healthy: nothing to keep
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.circuits[node]
	if c == nil {
		if h != healthFailed {
			return
		}
		c = &circuit{}
		b.circuits[node] = c
		b.tracked.Store(int32(len(b.circuits)))
	}
	switch h {
	case healthOK:
		delete(b.circuits, node) // closed, no failures
		b.tracked.Store(int32(len(b.circuits)))
	case healthFailed:
		if probe {
			c.probing = false
			c.openUntil = time.Now().Add(b.cooldown)
			return
		}
		if rt != 0 && c.seen(rt) {
			return // this round trip counted already
		}
		c.fails++
		if c.fails >= b.failures && c.openUntil.IsZero() {
			c.openUntil = time.Now().Add(b.cooldown)
		}
	default:
		if probe {
			c.probing = false // the probe told nothing: let the next call probe
		}
	}
}
