package slidelimit_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// goredisPipelines counts what go-redis sends for a client whose
// limiters send through it: pipelines and single commands.
type goredisPipelines struct {
	pipelines, pipelined, single atomic.Int64
}

func (h *goredisPipelines) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *goredisPipelines) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); name == "evalsha" || name == "eval" {
			h.single.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *goredisPipelines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		// Count the limiter's pipelines only: newer go-redis versions also
		// pipeline their own connection set-up (HELLO, CLIENT SETINFO).
		for _, cmd := range cmds {
			if name := cmd.Name(); name == "evalsha" || name == "eval" {
				h.pipelines.Add(1)
				h.pipelined.Add(int64(len(cmds)))
				break
			}
		}
		return next(ctx, cmds)
	}
}

// roundTrips counts, through the client's own hooks, the round trips
// go-redis made for the limiters of one client since it was made: the
// pipelines and single commands that carried allow scripts, and the
// scripts they carried.
type roundTrips struct{ h *goredisPipelines }

func countRoundTrips(t *testing.T, rdb redis.UniversalClient) *roundTrips {
	t.Helper()
	h := &goredisPipelines{}
	rdb.AddHook(h)
	return &roundTrips{h: h}
}

// sent returns the round trips and the allow scripts they carried.
func (r *roundTrips) sent() (trips, calls int64) {
	single := r.h.single.Load()
	return r.h.pipelines.Load() + single, r.h.pipelined.Load() + single
}

// sink keeps the busy loops' work from being optimised away.
var sink atomic.Int64

// busyLoops keeps n goroutines spinning until the test ends (at most 60 s),
// so that decisions compete with them for the machine's cores.
func busyLoops(t *testing.T, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := int64(0)
			for ctx.Err() == nil {
				for i := range 100000 {
					x += int64(i)
				}
			}
			sink.Add(x)
		}()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// burst calls Allow for identity from callers goroutines at once and
// returns how many were admitted and how many were fallbacks.
func burst(t *testing.T, lim *slidelimit.Limiter, identity string, callers int) (admitted, fallbacks int, errs []error) {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res, err := lim.Allow(t.Context(), identity)
			mu.Lock()
			defer mu.Unlock()
			if res.Allowed {
				admitted++
			}
			if res.Fallback {
				fallbacks++
			}
			if err != nil && len(errs) < 5 && !strings.Contains(err.Error(), "waited") {
				errs = append(errs, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	return admitted, fallbacks, errs
}

// TestBurstIsExactOnABusyHost sends 1,000 concurrent calls of one identity
// with the default 100 ms timeout while two goroutines spin on the cores,
// the load under which the limiter used to fail open hundreds of times. How
// many round trips they take depends on how the host schedules them: a
// call that finds its node idle goes alone, by design, and on a loaded host
// calls can trickle in one by one (TestWaitingCallsLeaveTogether holds the
// batching itself).
//
// The standalone and Cluster runs take turns, so that two busy loops, not
// four, compete with each.
func TestBurstIsExactOnABusyHost(t *testing.T) {
	oneAtATime(t, func(t *testing.T, rdb redis.UniversalClient) {
		lim, _ := newLimiter(t, rdb, slidelimit.Per(5, 10*time.Second), slidelimit.WithTimeout(slidelimit.DefaultTimeout))
		hook := countRoundTrips(t, rdb)
		busyLoops(t, 2)
		start := time.Now()
		admitted, fallbacks, errs := burst(t, lim, "burst", 1000)
		trips, calls := hook.sent()
		t.Logf("1,000 concurrent calls, GOMAXPROCS %d, two busy loops: %d admitted, %d fallbacks in %v; %d script calls in %d round trips",
			runtime.GOMAXPROCS(0), admitted, fallbacks, time.Since(start), calls, trips)
		if admitted != 5 || fallbacks != 0 || len(errs) != 0 {
			t.Fatalf("1,000 concurrent Allow, limit 5 = %d admitted, %d fallbacks, errors %v; want 5, 0, none", admitted, fallbacks, errs)
		}

		// 50 identities × 20 concurrent calls each.
		var mu sync.Mutex
		per := map[string]int{}
		var wg sync.WaitGroup
		fallbacks = 0
		var firstErr error
		for i := range 50 * 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := fmt.Sprintf("id%d", i%50)
				res, err := lim.Allow(t.Context(), id)
				mu.Lock()
				defer mu.Unlock()
				if err != nil && (firstErr == nil || strings.Contains(firstErr.Error(), "waited")) {
					firstErr = err
				}
				if res.Allowed {
					per[id]++
				}
				if res.Fallback {
					fallbacks++
				}
			}()
		}
		wg.Wait()
		for i := range 50 {
			if id := fmt.Sprintf("id%d", i); per[id] != 5 || fallbacks != 0 {
				t.Fatalf("50 identities × 20 concurrent calls: %s admitted %d, %d fallbacks in all (%v); want 5 each and none", id, per[id], fallbacks, firstErr)
			}
		}
	})
}

// TestDirectCallHeldWhileBusy sends a lone call on its caller's goroutine
// while Redis holds it (CLIENT PAUSE of writers) past the limiter's timeout
// and this process has more goroutines ready to run than CPUs: the call is
// not decided by the policy at its timeout, since the reply might sit
// unread, but waits on in a round trip that grants the busy allowance, and
// takes Redis's answer. (With the process and host idle the same call is a
// fallback, but whether a host is idle is not the test's to decide.)
func TestDirectCallHeldWhileBusy(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	lim, err := slidelimit.New(rdb, slidelimit.PerMinute(5), slidelimit.WithTimeout(50*time.Millisecond),
		slidelimit.WithFailurePolicy(slidelimit.FailClosed), slidelimit.WithDenyCache(0), slidelimit.WithBreaker(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	allow(t, lim, "first") // dials: the node has answered since
	if err := rdb.Do(ctx, "CLIENT", "PAUSE", 400, "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	busyLoops(t, 4*runtime.GOMAXPROCS(0))
	callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if res, err := lim.Allow(callCtx, "busy"); err != nil || !res.Allowed || res.Fallback {
		t.Errorf("a lone call held past its timeout in a busy process = %+v, %v; want Redis's admission", res, err)
	}
}

// TestLoneCallerIsSentAtOnce counts round trips: a caller alone is sent in
// a round trip of its own, never held back to wait for company.
func TestLoneCallerIsSentAtOnce(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		lim, _ := newLimiter(t, rdb, slidelimit.PerMinute(100))
		allow(t, lim, "warm") // loads the script: EVALSHA, NOSCRIPT, EVAL
		hook := countRoundTrips(t, rdb)
		for i := range 10 {
			allow(t, lim, "lone")
			if p, c := hook.sent(); p != int64(i+1) || c != int64(i+1) {
				t.Fatalf("after %d sequential calls: %d round trips carrying %d calls, want %d and %d", i+1, p, c, i+1, i+1)
			}
		}
	})
}

// TestBatchesShareRoundTrips checks concurrent callers of several limiters
// on one client share round trips, and every decision stays exact.
func TestBatchesShareRoundTrips(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		a, _ := newLimiter(t, rdb, slidelimit.PerMinute(50))
		b, _ := newLimiter(t, rdb, slidelimit.PerMinute(70))
		hook := countRoundTrips(t, rdb)
		var wg sync.WaitGroup
		var gotA, gotB atomic.Int64
		for i := range 400 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				lim, got := a, &gotA
				if i%2 == 1 {
					lim, got = b, &gotB
				}
				res, err := lim.Allow(t.Context(), "shared")
				if err != nil {
					t.Errorf("Allow = %v", err)
				}
				if res.Allowed {
					got.Add(1)
				}
			}()
		}
		wg.Wait()
		trips, calls := hook.sent()
		t.Logf("400 concurrent calls on two limiters: %d script calls in %d round trips", calls, trips)
		if gotA.Load() != 50 || gotB.Load() != 70 {
			t.Fatalf("admitted %d and %d, want 50 and 70", gotA.Load(), gotB.Load())
		}
		if trips >= 400 {
			t.Errorf("%d round trips for 400 concurrent calls: want them shared", trips)
		}
	})
}

// TestNoScriptMidTraffic flushes the script cache while calls are in
// flight: every batch that meets NOSCRIPT sends its calls again, whole.
func TestNoScriptMidTraffic(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		lim, _ := newLimiter(t, rdb, slidelimit.PerMinute(600))
		flush := func() error {
			if c, ok := rdb.(*redis.ClusterClient); ok {
				return c.ForEachMaster(t.Context(), func(ctx context.Context, n *redis.Client) error {
					return n.ScriptFlush(ctx).Err()
				})
			}
			return rdb.ScriptFlush(t.Context()).Err()
		}
		stop := make(chan struct{})
		flushed := make(chan int)
		go func() {
			n := 0
			for {
				select {
				case <-stop:
					flushed <- n
					return
				default:
				}
				if err := flush(); err != nil {
					t.Errorf("SCRIPT FLUSH: %v", err)
				}
				n++
				time.Sleep(2 * time.Millisecond)
			}
		}()
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 50 {
					res, err := lim.Allow(t.Context(), "flushed")
					if err != nil {
						t.Errorf("Allow during SCRIPT FLUSH = %+v, %v, want no error", res, err)
						return
					}
					if res.Allowed {
						admitted.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		close(stop)
		t.Logf("1,000 calls across %d SCRIPT FLUSHes", <-flushed)
		if got := admitted.Load(); got != 600 {
			t.Fatalf("1,000 calls, limit 600, under SCRIPT FLUSH: %d admitted, want 600", got)
		}
	})
}

// TestCallerCancellationLeavesBatchAlone cancels half the callers of a
// burst: they leave, and the others' decisions are unaffected and exact.
func TestCallerCancellationLeavesBatchAlone(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		lim, _ := newLimiter(t, rdb, slidelimit.PerMinute(1000))
		var wg sync.WaitGroup
		var stayed, admittedStayed, left atomic.Int64
		for i := range 600 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				if i%2 == 1 {
					go cancel() // leaves at some point: queued, sent or answered
				}
				res, err := lim.Allow(ctx, "cancel")
				switch {
				case err == nil:
					if i%2 == 0 {
						stayed.Add(1)
						if res.Allowed {
							admittedStayed.Add(1)
						}
					}
				case i%2 == 1 && errors.Is(err, context.Canceled):
					left.Add(1)
				default:
					t.Errorf("caller %d: Allow = %+v, %v", i, res, err)
				}
			}()
		}
		wg.Wait()
		t.Logf("%d callers cancelled before their decision came", left.Load())
		if stayed.Load() != 300 || admittedStayed.Load() != 300 {
			t.Fatalf("callers that stayed: %d decided, %d admitted; want 300 and 300", stayed.Load(), admittedStayed.Load())
		}
		// Whatever the cancelled callers recorded, the count stays exact.
		peek, err := lim.Peek(t.Context(), "cancel")
		if err != nil || peek.Remaining > 700 || peek.Remaining < 400 {
			t.Fatalf("Peek = %+v, %v, want 400..700 remaining: 300 stayed, up to 300 more reached Redis", peek, err)
		}
	})
}

// scripterOnly hides every method of a client but redis.Scripter's, as a
// wrapper of the user's own might: such a client cannot pipeline.
type scripterOnly struct{ redis.Scripter }

// TestClientWithoutPipelining runs a limiter on a client that cannot
// pipeline: each call is a round trip of its own, as exact as batched ones.
func TestClientWithoutPipelining(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		hook := &goredisPipelines{}
		rdb.AddHook(hook)
		lim, _ := newLimiter(t, scripterOnly{rdb}, slidelimit.Per(5, 10*time.Second))
		admitted, fallbacks, errs := burst(t, lim, "plain", 50)
		if admitted != 5 || fallbacks != 0 || len(errs) != 0 {
			t.Fatalf("50 concurrent calls on a client that cannot pipeline = %d admitted, %d fallbacks, errors %v; want 5, 0, none", admitted, fallbacks, errs)
		}
		if p := hook.pipelines.Load(); p != 0 {
			t.Errorf("%d pipelines on a client that cannot pipeline, want 0", p)
		}
	})
}
