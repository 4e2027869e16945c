package integration

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// TestFailLocalSharesQuota proves FailLocal's promise: with Redis down, n
// limiters (the replicas of one service, each with its own client) that
// share one identity and each hold quota/n of the limit admit at most the
// quota in total, exactly floor(quota/n) each, however many concurrent
// calls they get, and mark every decision Fallback with an error wrapping
// ErrUnavailable.
func TestFailLocalSharesQuota(t *testing.T) {
	tests := []struct {
		quota, replicas int
	}{
		{quota: 20, replicas: 4},
		{quota: 10, replicas: 3},
		{quota: 5, replicas: 5},
		{quota: 7, replicas: 1},
	}
	srv := redistest.StartServer(t)
	srv.Stop() // Redis is down for the whole test.
	for _, tt := range tests {
		t.Run(fmt.Sprintf("quota %d over %d replicas", tt.quota, tt.replicas), func(t *testing.T) {
			limit := slidelimit.PerMinute(tt.quota)
			prefix := redistest.Prefix(t)
			const identity = "shared"
			calls := 4 * tt.quota
			admitted := make([]atomic.Int64, tt.replicas)
			var bad atomic.Int64
			var firstBad atomic.Value
			start := make(chan struct{})
			var wg sync.WaitGroup
			for r := range tt.replicas {
				rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
				t.Cleanup(func() { _ = rdb.Close() })
				lim := newLimiter(t, rdb, prefix, limit, slidelimit.WithTimeout(50*time.Millisecond),
					slidelimit.WithFailurePolicy(slidelimit.FailLocal), slidelimit.WithReplicas(tt.replicas))
				for range calls {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						res, err := lim.Allow(t.Context(), identity)
						if !res.Fallback || !errors.Is(err, slidelimit.ErrUnavailable) {
							bad.Add(1)
							firstBad.CompareAndSwap(nil, fmt.Sprintf("%+v, %v", res, err))
						}
						if res.Allowed {
							admitted[r].Add(1)
						}
					}()
				}
			}
			close(start)
			wg.Wait()

			if n := bad.Load(); n > 0 {
				t.Errorf("%d calls with Redis down were not a Fallback with an error wrapping ErrUnavailable; first: %v", n, firstBad.Load())
			}
			share := tt.quota / tt.replicas
			total := int64(0)
			for r := range admitted {
				got := admitted[r].Load()
				total += got
				if got != int64(share) {
					t.Errorf("replica %d admitted %d of %d calls, want its share floor(%d/%d) = %d", r, got, calls, tt.quota, tt.replicas, share)
				}
			}
			if total > int64(tt.quota) {
				t.Errorf("%d replicas admitted %d calls in total, more than the quota %d", tt.replicas, total, tt.quota)
			}
			t.Logf("quota %d, %d replicas × %d concurrent calls: %d admitted in total (%d each)", tt.quota, tt.replicas, calls, total, share)
		})
	}
}
