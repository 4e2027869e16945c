package slidelimit_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// countDecisions returns an observer option and the number of decisions
// it has seen.
func countDecisions() (slidelimit.Option, *atomic.Int64) {
	n := new(atomic.Int64)
	return slidelimit.WithObserver(func(context.Context, slidelimit.Observation) { n.Add(1) }), n
}

// awaitNoQueues waits until every wait queue of the process has ended.
func awaitNoQueues(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for slidelimit.WaitQueues() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("WaitQueues() = %d ten seconds after the waiters returned, want 0", slidelimit.WaitQueues())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestWaitAdmitsEveryWaiterWithinTheLimit(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		count, decisions := countDecisions()
		limit := slidelimit.Per(5, 300*time.Millisecond)
		lim, prefix := newLimiter(t, rdb, limit, count)
		const waiters = 20
		var wg sync.WaitGroup
		errs := make(chan error, waiters)
		for range waiters {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := lim.Wait(t.Context(), "worker")
				if err == nil && !res.Allowed {
					err = errors.New("returned a denial without an error")
				}
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("Wait(worker) = %v, want an admission", err)
			}
		}
		// Every admission is in Redis's log; the limit never held more
		// than its quota (the script's own guarantee), so the 20 took at
		// least four windows. The queue asked once per admission and
		// about once per window it slept through, never once per waiter.
		got := decisions.Load()
		t.Logf("%d waiters admitted with %d decisions", waiters, got)
		if got > 2*waiters {
			t.Errorf("decisions = %d for %d admissions, want at most %d: waiters poll", got, waiters, 2*waiters)
		}
		if n := zcardOf(t, rdb, prefix, "worker", limit); n > int64(limit.Quota) {
			t.Errorf("ZCARD = %d, want at most %d", n, limit.Quota)
		}
		awaitNoQueues(t)
	})
}

func TestWaitLeavesWithoutConsumingQuota(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		limit := slidelimit.Per(1, time.Second)
		lim, prefix := newLimiter(t, rdb, limit)
		allow(t, lim, "worker")
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(50*time.Millisecond, cancel)
		res, err := lim.Wait(ctx, "worker")
		if !errors.Is(err, context.Canceled) || res.Allowed {
			t.Fatalf("Wait(cancelled) = %+v, %v, want a denial and context.Canceled", res, err)
		}
		awaitNoQueues(t)
		// Once the first unit has left its window, nothing may be left:
		// the waiter that left was never recorded, then or later.
		deadline := time.Now().Add(5 * time.Second)
		for zcardOf(t, rdb, prefix, "worker", limit) != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("ZCARD = %d five seconds after a 1 s window, want 0", zcardOf(t, rdb, prefix, "worker", limit))
			}
			time.Sleep(20 * time.Millisecond)
		}
		awaitNoQueues(t)
		if n := zcardOf(t, rdb, prefix, "worker", limit); n != 0 {
			t.Errorf("ZCARD = %d after the cancelled waiter's queue ended, want 0", n)
		}
	})
}

func TestWaitRefusesADeadlineItCannotMeet(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		limit := slidelimit.Per(1, 5*time.Second)
		lim, prefix := newLimiter(t, rdb, limit)
		allow(t, lim, "full")
		if err := lim.Block(t.Context(), "blocked", 5*time.Second); err != nil {
			t.Fatalf("Block = %v", err)
		}
		for _, identity := range []string{"full", "blocked"} {
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			res, err := lim.Wait(ctx, identity)
			ended := ctx.Err()
			cancel()
			if !errors.Is(err, slidelimit.ErrWouldExceedDeadline) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Wait(%s, 1 s deadline) error = %v, want ErrWouldExceedDeadline and DeadlineExceeded", identity, err)
			}
			if ended != nil {
				t.Errorf("Wait(%s) returned after its context ended (%v), want at once", identity, ended)
			}
			if res.Allowed || res.RetryAfter <= time.Second {
				t.Errorf("Wait(%s) = Allowed %v, RetryAfter %v, want a denial beyond the deadline", identity, res.Allowed, res.RetryAfter)
			}
		}
		awaitNoQueues(t)
		if n := zcardOf(t, rdb, prefix, "blocked", limit); n != 0 {
			t.Errorf("ZCARD(blocked) = %d, want 0: a refused waiter records nothing", n)
		}
	})
}

func TestWaitHonoursABlock(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		lim, _ := newLimiter(t, rdb, slidelimit.PerMinute(100))
		if err := lim.Block(t.Context(), "partner", 300*time.Millisecond); err != nil {
			t.Fatalf("Block = %v", err)
		}
		if left, err := lim.Blocked(t.Context(), "partner"); err != nil || left <= 0 {
			t.Fatalf("Blocked(partner) = %v, %v, want a block in force", left, err)
		}
		res, err := lim.Wait(t.Context(), "partner")
		if err != nil || !res.Allowed {
			t.Fatalf("Wait(partner) = %+v, %v, want an admission", res, err)
		}
		// The block expires by Redis's clock; the admission came after it.
		if left, err := lim.Blocked(t.Context(), "partner"); err != nil || left != 0 {
			t.Errorf("Blocked(partner) after Wait = %v, %v, want 0: admitted during the block", left, err)
		}
	})
}

func TestBlockOnlyLengthens(t *testing.T) {
	rdb := redistest.Client(t)
	lim, _ := newLimiter(t, rdb, slidelimit.PerMinute(10))
	ctx := t.Context()
	for _, d := range []time.Duration{10 * time.Second, time.Second, 0, -time.Second} {
		if err := lim.Block(ctx, "p", d); err != nil {
			t.Fatalf("Block(%v) = %v", d, err)
		}
	}
	if left, err := lim.Blocked(ctx, "p"); err != nil || left < 5*time.Second {
		t.Errorf("Blocked(p) = %v, %v, want the 10 s block", left, err)
	}
	if err := lim.Block(ctx, "p", 100*time.Hour); err != nil {
		t.Fatalf("Block(100h) = %v", err)
	}
	if left, _ := lim.Blocked(ctx, "p"); left > slidelimit.MaxBlock {
		t.Errorf("Blocked(p) = %v, want at most MaxBlock", left)
	}
	if left, err := lim.Blocked(ctx, "never"); err != nil || left != 0 {
		t.Errorf("Blocked(never) = %v, %v, want 0, nil", left, err)
	}
	if err := lim.Block(ctx, "", time.Second); !errors.Is(err, slidelimit.ErrInvalidKey) {
		t.Errorf("Block(\"\") = %v, want ErrInvalidKey", err)
	}
	// The block's key is no limit's key.
	if got, err := lim.Allow(ctx, "p"); err != nil || !got.Allowed {
		t.Errorf("Allow(p) during a block = %+v, %v, want an admission: a block pauses waiters only", got, err)
	}
}

func TestWaitRejectsBadInput(t *testing.T) {
	rdb := redistest.Client(t)
	lim, _ := newLimiter(t, rdb, slidelimit.PerMinute(10))
	if _, err := lim.WaitN(t.Context(), "w", 11); !errors.Is(err, slidelimit.ErrInvalidCost) {
		t.Errorf("WaitN(cost 11) = %v, want ErrInvalidCost", err)
	}
	if _, err := lim.Wait(t.Context(), ""); !errors.Is(err, slidelimit.ErrInvalidKey) {
		t.Errorf("Wait(\"\") = %v, want ErrInvalidKey", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if res, err := lim.Wait(ctx, "w"); !errors.Is(err, context.Canceled) || res.Allowed {
		t.Errorf("Wait(ended context) = %+v, %v, want context.Canceled", res, err)
	}
}

func TestWaitFollowsTheFailurePolicy(t *testing.T) {
	srv, rdb, open, closed := policyLimiters(t)
	local, _ := newLimiter(t, rdb, slidelimit.Per(2, 400*time.Millisecond), slidelimit.WithTimeout(200*time.Millisecond),
		slidelimit.WithFailurePolicy(slidelimit.FailLocal), slidelimit.WithReplicas(2))
	srv.Stop()

	res, err := open.Wait(t.Context(), "w")
	if !res.Allowed || !res.Fallback || !errors.Is(err, slidelimit.ErrUnavailable) {
		t.Errorf("FailOpen Wait = %+v, %v, want a Fallback admission with ErrUnavailable", res, err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	res, err = closed.Wait(ctx, "w")
	if res.Allowed || !errors.Is(err, slidelimit.ErrWouldExceedDeadline) {
		t.Errorf("FailClosed Wait = %+v, %v, want a refusal: it denies for a second", res, err)
	}
	// FailLocal: a share of one unit per 400 ms in this process; a second
	// waiter is admitted only after the first unit's window.
	var admitted []time.Time
	for range 2 {
		res, err := local.Wait(t.Context(), "w")
		if !res.Allowed || !res.Fallback || !errors.Is(err, slidelimit.ErrUnavailable) {
			t.Fatalf("FailLocal Wait = %+v, %v, want a Fallback admission", res, err)
		}
		admitted = append(admitted, time.Now())
	}
	// The first stamp may come late on a loaded host (it follows the
	// admission): what a share of 1 must not do is admit the second at
	// once, or well within the window.
	if gap := admitted[1].Sub(admitted[0]); gap < 350*time.Millisecond {
		t.Errorf("FailLocal admitted two units %v apart, want about a window (400 ms) apart on a share of 1", gap)
	}
	awaitNoQueues(t)
}

// zcardOf returns the number of units identity holds under limit.
func zcardOf(t *testing.T, rdb redis.UniversalClient, prefix, identity string, limit slidelimit.Limit) int64 {
	t.Helper()
	key, err := slidelimit.Key(prefix, identity, limit)
	if err != nil {
		t.Fatalf("Key = %v", err)
	}
	return keyUnits(t, rdb, key)
}

// TestAWaitersHeadLeavingKeepsItsOwnAdmission: the head waiter carries a
// request id and leaves while Redis decides for it; the admission Redis
// makes is the head's own, so the waiter behind it is not given it, and
// the head's retry with its id is told it was admitted: one admission for
// a limit of one.
func TestAWaitersHeadLeavingKeepsItsOwnAdmission(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = admin.Close() })
	lim, err := slidelimit.New(rdb, slidelimit.PerMinute(1), slidelimit.WithTimeout(time.Minute), slidelimit.WithDenyCache(0))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := lim.Peek(ctx, "partner"); err != nil { // loads the script
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "CLIENT", "PAUSE", 60000, "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	unpause := func() { _ = admin.Do(context.WithoutCancel(ctx), "CLIENT", "UNPAUSE").Err() }
	defer unpause()

	headCtx, leave := context.WithCancel(slidelimit.ContextWithRequestID(ctx, "X"))
	headDone := make(chan error, 1)
	go func() {
		_, err := lim.Wait(headCtx, "partner")
		headDone <- err
	}()
	awaitCond(t, "the head in the queue", func() bool { return slidelimit.Waiters(lim, "partner") == 1 })
	otherCtx, stop := context.WithTimeout(ctx, 3*time.Second)
	defer stop()
	otherDone := make(chan slidelimit.Result, 1)
	go func() {
		res, _ := lim.Wait(otherCtx, "partner")
		otherDone <- res
	}()
	awaitCond(t, "the second waiter in the queue", func() bool { return slidelimit.Waiters(lim, "partner") == 2 })
	leave() // while Redis, paused, has the head's decision
	if err := <-headDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("the head's Wait = %v, want context.Canceled", err)
	}
	unpause()
	other := <-otherDone
	retry, err := lim.Allow(slidelimit.ContextWithRequestID(ctx, "X"), "partner")
	if err != nil {
		t.Fatal(err)
	}
	if other.Allowed {
		t.Errorf("the waiter behind the head was given the head's admission (%+v), want it to wait for a unit of its own", other)
	}
	if !retry.Allowed {
		t.Errorf("the head's retry with its id = %+v, want told it was admitted", retry)
	}
	if n := zcardOf(t, rdb, "slidelimit:", "partner", slidelimit.PerMinute(1)); n != 1 {
		t.Errorf("the log holds %d units, want 1", n)
	}
}

// awaitCond polls cond every millisecond for up to 10 s.
func awaitCond(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10 s for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestAWaiterWithItsOwnIDTakesNoOtherAdmission: a head waiter leaves
// while its admission is on its way (Redis paused); the admission made for
// it goes to no waiter with an id of its own (ContextWithRequestID), whose
// retry must find that id recorded: the second waiter is admitted under its
// own id, and its retry with that id is answered admitted while the limit
// is full. Before, it took the head's admission, recorded under the head's
// id, and its retry was counted anew and denied.
func TestAWaiterWithItsOwnIDTakesNoOtherAdmission(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	const window = 300 * time.Millisecond
	lim, _ := newLimiter(t, rdb, slidelimit.Per(1, window), slidelimit.WithDenyCache(0))
	ctx := t.Context()
	if res := allow(t, lim, "w"); !res.Allowed {
		t.Fatalf("first Allow = %+v, want admitted", res)
	}
	start := time.Now()
	headCtx, leave := context.WithCancel(ctx)
	defer leave()
	head := make(chan error, 1)
	go func() {
		_, err := lim.Wait(headCtx, "w")
		head <- err
	}()
	time.Sleep(20 * time.Millisecond) // the head queues first
	own := slidelimit.ContextWithRequestID(ctx, "own")
	type reply struct {
		res slidelimit.Result
		err error
	}
	second := make(chan reply, 1)
	go func() {
		res, err := lim.Wait(own, "w")
		second <- reply{res, err}
	}()
	// Redis holds every command from before the head's next attempt (a
	// window after the first admission) until well after the head left.
	time.Sleep(window/2 - time.Since(start))
	if err := rdb.ClientPause(ctx, 2*window).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(window + window/3 - time.Since(start)) // the head's attempt is waiting in Redis
	leave()
	if err := <-head; err == nil {
		t.Fatal("the head's Wait returned nil after it left")
	}
	r := <-second
	if r.err != nil || !r.res.Allowed {
		t.Fatalf("the second waiter's Wait = %+v, %v; want admitted", r.res, r.err)
	}
	res, err := lim.Allow(own, "w")
	if err != nil || !res.Allowed {
		t.Fatalf("a retry with the second waiter's id = %+v, %v; want it answered admitted, as a retry of an admitted id", res, err)
	}
	awaitNoQueues(t)
}
