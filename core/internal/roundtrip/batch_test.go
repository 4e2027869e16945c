package roundtrip

import (
	"context"
	"crypto/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slidelimit/slidelimit/core/internal/script"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// decision returns the allow script's command deciding one request of cost
// 1 on the exact log key under quota per minute, recorded under a fresh
// request id. keys are further keys the command declares, of key's hash
// tag: stepped logs counted by the same quota, each declared with its ids.
// It is the one place these tests build the script's arguments.
func decision(quota int, key string, keys ...string) script.Command {
	limits := []script.Limit{{Quota: quota, Window: time.Minute.Microseconds()}}
	all := []string{key}
	for i, k := range keys {
		limits = append(limits, script.Limit{Quota: quota, Window: time.Minute.Microseconds(), Step: int64(i+1) * time.Second.Microseconds()})
		all = append(all, k, k+":ids") // a stepped log and its ids
	}
	return script.NewPlan(limits).Command(all, 1, rand.Text()[:8], "")
}

// admitted reports whether reply admits its request: the short reply, one
// integer, always does (decide.lua).
func admitted(reply []int64) bool { return len(reply) == 1 || len(reply) > 0 && reply[0] == 1 }

// scriptHook counts, through a client's own hooks, the round trips that
// carried allow scripts, and the scripts they carried.
type scriptHook struct {
	trips, calls atomic.Int64
}

func (h *scriptHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); name == "evalsha" || name == "eval" {
			h.trips.Add(1)
			h.calls.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *scriptHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		// Count the scripts' pipelines only: newer go-redis versions also
		// pipeline their own connection set-up (HELLO, CLIENT SETINFO).
		for _, cmd := range cmds {
			if name := cmd.Name(); name == "evalsha" || name == "eval" {
				h.trips.Add(1)
				h.calls.Add(int64(len(cmds)))
				break
			}
		}
		return next(ctx, cmds)
	}
}

// load returns how many calls wait in the queue of c's client, which is
// not a cluster, and how many round trips it has out.
func load(c *Caller) (queued, inFlight int) {
	ln := c.disp.lane("")
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return len(ln.queue), ln.inFlight
}

// TestWaitingCallsLeaveTogether holds Redis (CLIENT PAUSE of writers) while
// the most round trips a node may have out are out, and queues 300 more
// calls behind them: once Redis answers, the waiting calls leave together,
// at most 128 to a round trip, and the limit holds exactly.
func TestWaitingCallsLeaveTogether(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = admin.Close() })
	c := New(rdb, Config{Timeout: time.Minute})
	ctx := t.Context()
	key := redistest.Prefix(t) + "{shared}"
	// Load the scripts a lone call and a batch run, so that no NOSCRIPT
	// sends a round trip again.
	for _, s := range []*redis.Script{script.Exact, script.Allow} {
		if err := s.Load(ctx, rdb).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Decide(ctx, decision(1, redistest.Prefix(t)+"{warm}")); err != nil {
		t.Fatal(err)
	}
	hook := &scriptHook{}
	rdb.AddHook(hook)
	if err := admin.Do(ctx, "CLIENT", "PAUSE", 60000, "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	unpaused := false
	unpause := func() {
		if !unpaused {
			unpaused = true
			_ = admin.Do(ctx, "CLIENT", "UNPAUSE").Err()
		}
	}
	defer unpause()
	const inFlight, waiting = 4, 300
	var admittedCalls, failed atomic.Int64
	var wg sync.WaitGroup
	for range inFlight + waiting {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reply, err := c.Decide(ctx, decision(100, key))
			if err != nil {
				failed.Add(1)
			}
			if admitted(reply) {
				admittedCalls.Add(1)
			}
		}()
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		q, out := load(c)
		if q == waiting && out == inFlight {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s, %d calls queued and %d round trips out; want %d and %d", q, out, waiting, inFlight)
		}
		time.Sleep(time.Millisecond)
	}
	unpause()
	wg.Wait()
	trips, calls := hook.trips.Load(), hook.calls.Load()
	t.Logf("%d calls behind %d round trips held by Redis: %d script calls in %d round trips", waiting, inFlight, calls, trips)
	if admittedCalls.Load() != 100 || failed.Load() != 0 {
		t.Fatalf("%d concurrent decisions, limit 100 = %d admitted, %d errors; want 100, 0", inFlight+waiting, admittedCalls.Load(), failed.Load())
	}
	// The held round trips, then 300 waiting calls in batches of 128.
	if want := int64(inFlight + (waiting+127)/128); trips != want {
		t.Errorf("%d round trips, want %d: the %d held plus %d waiting calls 128 at a time", trips, want, inFlight, waiting)
	}
}
