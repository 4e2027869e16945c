package integration

import (
	"bytes"
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// TestNoScriptRecovery flushes Redis's script cache (SCRIPT FLUSH, on every
// primary of a cluster) again and again while 16 goroutines share one
// limit, as a restart, failover or new shard would. Every call must still be
// decided by Redis, with no error, and the count must stay exact. The
// client's connections count the NOSCRIPT replies, to prove the flushes hit
// calls in flight.
func TestNoScriptRecovery(t *testing.T) {
	const (
		quota      = 200
		calls      = 400
		goroutines = 16
		flushEvery = 40 // decisions
	)
	limit := slidelimit.PerMinute(quota)
	for _, be := range backends() {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			noscript := &noscriptCounter{}
			rdb := dropClient(t, targetOf(t, be.client(t)), noscript.dial, 0)
			prefix := redistest.Prefix(t)
			const identity = "flushed"

			var decisions, flushes atomic.Int64
			var flushErr atomic.Value
			flush := func(ctx context.Context, _ slidelimit.Observation) {
				if decisions.Add(1)%flushEvery != 0 {
					return
				}
				err := forEachMaster(ctx, rdb, func(ctx context.Context, c *redis.Client) error {
					return c.ScriptFlush(ctx).Err()
				})
				if err != nil {
					flushErr.CompareAndSwap(nil, err)
					return
				}
				flushes.Add(1)
			}
			// No deny cache: once the quota is spent, the later calls must
			// still reach Redis for the later flushes to meet them.
			lim := newLimiter(t, rdb, prefix, limit,
				slidelimit.WithTimeout(10*time.Second), slidelimit.WithObserver(flush), slidelimit.WithDenyCache(0))

			var next, allowed atomic.Int64
			var firstErr atomic.Value
			var wg sync.WaitGroup
			for range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for next.Add(1) <= calls {
						res, err := lim.Allow(t.Context(), identity)
						if err != nil {
							firstErr.CompareAndSwap(nil, err)
						} else if res.Allowed {
							allowed.Add(1)
						}
					}
				}()
			}
			wg.Wait()

			if err := flushErr.Load(); err != nil {
				t.Fatalf("SCRIPT FLUSH: %v", err)
			}
			if err := firstErr.Load(); err != nil {
				t.Errorf("Allow(%q) after SCRIPT FLUSH = %v, want a decision from Redis", identity, err)
			}
			if got := allowed.Load(); got != quota {
				t.Errorf("Allow(%q) admitted %d of %d calls, want %d", identity, got, calls, quota)
			}
			if got := zcard(t, rdb, prefix, identity, limit); got != quota {
				t.Errorf("ZCARD = %d, want %d", got, quota)
			}
			if flushes.Load() == 0 || noscript.n.Load() == 0 {
				t.Errorf("%d flushes caused %d NOSCRIPT replies, want both above 0: the test did not exercise the reload",
					flushes.Load(), noscript.n.Load())
			}
			t.Logf("%d flushes during %d calls caused %d NOSCRIPT replies, all reloaded", flushes.Load(), calls, noscript.n.Load())
		})
	}
}

// noscriptCounter counts the NOSCRIPT replies Redis sends on the
// connections it dials, whoever reads them: go-redis or the limiter's own
// connections.
type noscriptCounter struct{ n atomic.Int64 }

func (h *noscriptCounter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &noscriptConn{Conn: c, n: &h.n}, nil
}

// noscriptConn counts the NOSCRIPT error replies it reads.
type noscriptConn struct {
	net.Conn
	n    *atomic.Int64
	tail []byte // the end of the last read, in case a reply is split
}

var noscriptReply = []byte("-NOSCRIPT")

func (c *noscriptConn) Read(p []byte) (int, error) {
	k, err := c.Conn.Read(p)
	c.tail = append(c.tail, p[:k]...)
	c.n.Add(int64(bytes.Count(c.tail, noscriptReply)))
	// Keep what could begin a reply cut by the next read, and nothing
	// already counted.
	keep := min(len(c.tail), len(noscriptReply)-1)
	c.tail = append(c.tail[:0], c.tail[len(c.tail)-keep:]...)
	return k, err
}
