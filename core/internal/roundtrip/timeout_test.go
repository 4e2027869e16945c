package roundtrip

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// TestAnotherCallersTimeoutDecidesNoQueuedCall: Callers of 20 ms and of
// 10 s on one go-redis client share its lane. Redis stalls 1.5 s (CLIENT
// PAUSE) while the 20 ms Caller's calls hold every round trip the lane may
// have out and the 10 s Caller's calls wait behind them. The 20 ms calls
// fail for want of an answer, as they must; the 10 s calls, whose own
// timeout Redis's silence has not reached, must stay queued, be sent, and
// be decided by Redis, every one. (They used to be failed at once with the
// 20 ms round trips, and a FailOpen limiter admitted them uncounted.)
func TestAnotherCallersTimeoutDecidesNoQueuedCall(t *testing.T) {
	for _, ctxTimeout := range []bool{false, true} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", ctxTimeout), func(t *testing.T) {
			srv := redistest.StartServer(t)
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: ctxTimeout})
			t.Cleanup(func() { _ = rdb.Close() })
			admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
			t.Cleanup(func() { _ = admin.Close() })
			short := New(rdb, Config{Timeout: 20 * time.Millisecond})
			long := New(rdb, Config{Timeout: 10 * time.Second})
			if short.disp != long.disp {
				t.Fatal("two Callers on one client do not share its dispatcher")
			}
			prefix := redistest.Prefix(t)
			if _, err := long.Decide(t.Context(), decision(1000, prefix+"{warm}")); err != nil { // loads the script, dials
				t.Fatal(err)
			}
			// The 10 s calls must queue behind the 20 ms ones before those
			// time out; on a host too busy for that, the round is set up again.
			for round := 1; ; round++ {
				if stalledRound(t, admin, short, long, prefix) {
					return
				}
				if round == 5 {
					t.Fatal("in 5 rounds the 20 ms calls timed out before the 10 s calls had queued behind them")
				}
			}
		})
	}
}

// stalledRound stalls Redis 1.5 s and sends 8 calls of short, then 40 of
// long while short's calls hold every round trip out. It reports false,
// having checked nothing, if a call of short was decided before every
// call of long had queued.
func stalledRound(t *testing.T, admin *redis.Client, short, long *Caller, prefix string) bool {
	t.Helper()
	ctx := t.Context()
	const pause = 1500 * time.Millisecond
	if err := admin.Do(ctx, "CLIENT", "PAUSE", pause.Milliseconds(), "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	ln := long.disp.lane("")
	var wg sync.WaitGroup
	defer wg.Wait()
	var shortDone atomic.Int64
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = short.Decide(ctx, decision(1000, fmt.Sprintf("%s{short%d}", prefix, i)))
			shortDone.Add(1)
		}()
	}
	waitFor(t, "the 20 ms calls to hold every round trip", func() bool {
		ln.mu.Lock()
		defer ln.mu.Unlock()
		return ln.inFlight == ln.d.maxInFlight
	})
	const longCalls = 40
	errs := make(chan error, longCalls)
	for i := range longCalls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := long.Decide(ctx, decision(1000, fmt.Sprintf("%s{long%d}", prefix, i)))
			errs <- err
		}()
	}
	queued := func() int {
		ln.mu.Lock()
		defer ln.mu.Unlock()
		n := 0
		for _, c := range ln.queue {
			if c.timeout == long.timeout {
				n++
			}
		}
		return n
	}
	waitFor(t, "the 10 s calls to queue", func() bool { return queued() == longCalls || shortDone.Load() > 0 })
	if shortDone.Load() > 0 {
		_ = admin.Do(ctx, "CLIENT", "UNPAUSE").Err()
		wg.Wait()
		return false
	}
	wg.Wait()
	close(errs)
	failed := 0
	for err := range errs {
		if err != nil {
			failed++
			if failed == 1 {
				t.Errorf("a 10 s call queued behind 20 ms calls while Redis stalled %v: %v, want Redis's decision", pause, err)
			}
		}
	}
	if failed > 0 {
		t.Errorf("%d of %d calls of the 10 s Caller failed while Redis stalled %v; want 0", failed, longCalls, pause)
	}
	return true
}
