package integration

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// TestSameMillisecondBurst proves that requests admitted in the same
// instant never collapse into one sorted-set member: a burst of 1,000 calls
// under a limit of 1,000 is admitted whole, and the set holds exactly 1,000
// members. It runs twice: with Redis TIME, where the burst packs many calls
// into each millisecond, and with a client clock frozen at one instant,
// where every member has the very same score.
func TestSameMillisecondBurst(t *testing.T) {
	const (
		calls      = 1000
		goroutines = 64
	)
	frozen := time.Now()
	clocks := []struct {
		name string
		opts []slidelimit.Option
	}{
		{"redis time", nil},
		{"frozen client clock", []slidelimit.Option{slidelimit.WithClock(func() time.Time { return frozen })}},
	}
	limit := slidelimit.Per(calls, time.Minute)
	for _, be := range backends() {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			rdb := be.client(t)
			for _, clk := range clocks {
				t.Run(clk.name, func(t *testing.T) {
					prefix := redistest.Prefix(t)
					const identity = "burst"
					opts := append([]slidelimit.Option{slidelimit.WithTimeout(10 * time.Second)}, clk.opts...)
					lim := newLimiter(t, rdb, prefix, limit, opts...)

					var next, allowed, denied atomic.Int64
					var firstErr atomic.Value
					start := make(chan struct{})
					var wg sync.WaitGroup
					for range goroutines {
						wg.Add(1)
						go func() {
							defer wg.Done()
							<-start
							for next.Add(1) <= calls {
								res, err := lim.Allow(t.Context(), identity)
								switch {
								case err != nil:
									firstErr.CompareAndSwap(nil, err)
								case res.Allowed:
									allowed.Add(1)
								default:
									denied.Add(1)
								}
							}
						}()
					}
					close(start)
					wg.Wait()

					if err := firstErr.Load(); err != nil {
						t.Fatalf("Allow(%q) failed: %v", identity, err)
					}
					if got := allowed.Load(); got != calls {
						t.Errorf("Allow(%q) admitted %d of %d calls (denied %d), want all", identity, got, calls, denied.Load())
					}
					if got := zcard(t, rdb, prefix, identity, limit); got != calls {
						t.Errorf("ZCARD = %d after %d admitted calls, want %d: members collapsed", got, calls, calls)
					}
					logSpread(t, rdb, prefix, identity, limit)
				})
			}
		})
	}
}

// logSpread logs how many distinct milliseconds the set's scores span and
// the most members sharing one, to show how dense the burst was.
func logSpread(t *testing.T, rdb redis.UniversalClient, prefix, identity string, limit slidelimit.Limit) {
	t.Helper()
	key, err := slidelimit.Key(prefix, identity, limit)
	if err != nil {
		t.Fatalf("Key(%q) = %v", identity, err)
	}
	members, err := rdb.ZRangeWithScores(t.Context(), key, 0, -1).Result()
	if err != nil {
		t.Fatalf("ZRANGE %s WITHSCORES: %v", key, err)
	}
	perMs := make(map[int64]int)
	most := 0
	for _, m := range members {
		ms := int64(m.Score) / 1000
		perMs[ms]++
		most = max(most, perMs[ms])
	}
	t.Logf("%d members over %d distinct milliseconds, up to %d in one", len(members), len(perMs), most)
}
