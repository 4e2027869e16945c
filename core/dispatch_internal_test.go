package slidelimit

import (
	"context"
	"errors"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// silentListener accepts connections and never answers.
func silentListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				_ = c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() { _ = ln.Close(); <-done })
	return ln.Addr().String()
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 5s for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestQueueFull fills a dispatcher shrunk to one round trip of one call and
// a queue of two: the next call is decided by the policy at once, with an
// error wrapping ErrUnavailable, and says nothing to the breaker.
func TestQueueFull(t *testing.T) {
	// Short socket timeouts end the silent round trip soon after the callers
	// leave; newer go-redis versions first wait on their connection set-up
	// (HELLO) for a whole ReadTimeout, 3 s by default, more than once.
	rdb := redis.NewClient(&redis.Options{Addr: silentListener(t), MaxRetries: -1,
		ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	lim, err := New(rdb, PerMinute(5), WithTimeout(time.Minute), WithFailurePolicy(FailClosed), WithBreaker(1, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	d := lim.disp
	d.maxInFlight, d.maxBatch, d.maxQueue = 1, 1, 2
	ctx, cancel := context.WithCancel(t.Context())
	left := make(chan error, 3)
	for range 3 {
		go func() {
			_, err := lim.Allow(ctx, "q")
			left <- err
		}()
	}
	ln := d.lane("")
	waitFor(t, "one call in flight and two queued", func() bool {
		ln.mu.Lock()
		defer ln.mu.Unlock()
		return ln.inFlight == 1 && len(ln.queue) == 2
	})
	start := time.Now()
	res, err := lim.Allow(t.Context(), "q")
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, errQueueFull) || res.Allowed || !res.Fallback {
		t.Fatalf("Allow with the queue full = %+v, %v, want a fail-closed fallback wrapping ErrUnavailable", res, err)
	}
	t.Logf("a call meeting a full queue was decided in %v", time.Since(start))
	if _, err := lim.brk.admit(""); err != nil {
		t.Errorf("after a full queue the breaker = %v, want closed: a full queue is not a Redis failure", err)
	}
	cancel()
	for range 3 {
		if err := <-left; !errors.Is(err, context.Canceled) {
			t.Errorf("a cancelled caller got %v, want context.Canceled", err)
		}
	}
	waitFor(t, "the queue to empty", func() bool {
		ln.mu.Lock()
		defer ln.mu.Unlock()
		return ln.inFlight == 0
	})
}

// TestLoneCallerLeaves sends a lone call to a silent Redis and ends its
// caller's context: the caller leaves at once, while the round trip holds
// its place in flight until it ends; then the call queued behind it
// meanwhile is sent (a round trip whose every call left tells nothing of
// Redis) and fails on its own. A fast path that runs a lone call's round
// trip on its caller's goroutine must keep all of this.
func TestLoneCallerLeaves(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: silentListener(t), MaxRetries: -1,
		ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	d := dispatcherFor(rdb)
	d.maxInFlight = 1
	ln := d.lane("")
	lane := func() (inFlight, queued int) {
		ln.mu.Lock()
		defer ln.mu.Unlock()
		return ln.inFlight, len(ln.queue)
	}
	ctx, cancel := context.WithCancel(t.Context())
	first := make(chan outcome, 1)
	go func() { first <- d.do(ctx, "", append(newCommand(1, 1), "k", 1), time.Minute) }()
	waitFor(t, "the lone call in flight", func() bool { n, _ := lane(); return n == 1 })
	second := make(chan outcome, 1)
	go func() { second <- d.do(t.Context(), "", append(newCommand(1, 1), "k", 1), time.Minute) }()
	waitFor(t, "a second call queued", func() bool { _, q := lane(); return q == 1 })

	cancel()
	if o := <-first; !errors.Is(o.err, context.Canceled) {
		t.Fatalf("the lone caller whose context ended got %v, want context.Canceled", o.err)
	}
	if n, q := lane(); n != 1 || q != 1 {
		t.Errorf("right after the lone caller left: %d round trips in flight and %d calls queued, want 1 and 1", n, q)
	}
	select {
	case o := <-second:
		if o.err == nil || o.h != healthFailed {
			t.Errorf("the call queued behind the silent round trip got %v (health %v), want a failed Redis", o.err, o.h)
		}
	case <-time.After(time.Minute):
		t.Fatal("the call queued behind the left round trip was not decided within a minute")
	}
	waitFor(t, "the lane to empty", func() bool { n, q := lane(); return n == 0 && q == 0 })
}

// TestDirectCallKeepsTheTimeout sends lone calls, each on its caller's
// goroutine, through a client that gives up at a context's deadline, to a
// Redis that never answers: each is decided by the policy once the
// limiter's timeout passes, long before the client's own ReadTimeout, and
// counts as a failed round trip, so the breaker opens.
func TestDirectCallKeepsTheTimeout(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: silentListener(t), MaxRetries: -1, ContextTimeoutEnabled: true,
		ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	t.Cleanup(func() { _ = rdb.Close() })
	lim, err := New(rdb, PerMinute(5), WithTimeout(50*time.Millisecond), WithFailurePolicy(FailClosed), WithBreaker(2, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if !lim.disp.bounded {
		t.Fatal("a client with ContextTimeoutEnabled is not taken as giving up at a deadline")
	}
	// As if the node had answered before: a lone call to a node never
	// answered goes through a round trip that allows for dialing.
	lim.disp.lane("").answered.Store(time.Now().UnixNano())
	for i := range 2 {
		start := time.Now()
		res, err := lim.Allow(t.Context(), "d")
		if !errors.Is(err, ErrUnavailable) || res.Allowed || !res.Fallback || !isTimeout(err) {
			t.Fatalf("lone Allow #%d to a silent Redis = %+v, %v; want a fail-closed fallback on a timeout", i+1, res, err)
		}
		// The bound is the client's ReadTimeout, which the call must not wait for.
		if took := time.Since(start); took > 30*time.Second {
			t.Fatalf("lone Allow #%d took %v: it waited for the client's ReadTimeout", i+1, took)
		}
	}
	if _, err := lim.brk.admit(""); !errors.Is(err, ErrCircuitOpen) {
		t.Errorf("after two lone calls timed out the breaker = %v, want open", err)
	}
}

// TestBreakerIsPerNode fails one node: only its circuit opens.
func TestBreakerIsPerNode(t *testing.T) {
	b := newBreaker(2, time.Minute)
	b.record("a", 1, healthFailed, false)
	b.record("a", 1, healthFailed, false) // the same round trip counts once
	if _, err := b.admit("a"); err != nil {
		t.Fatalf("after one failed round trip admit(a) = %v, want closed", err)
	}
	b.record("a", 2, healthFailed, false)
	if _, err := b.admit("a"); !errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("after two failed round trips admit(a) = %v, want ErrCircuitOpen", err)
	}
	if probe, err := b.admit("b"); err != nil || probe {
		t.Fatalf("admit(b) = %v, %v, want closed: b never failed", probe, err)
	}
	b.record("b", 3, healthOK, false)
	if _, err := b.admit("a"); !errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("after b answered admit(a) = %v, want still open", err)
	}
	if newBreaker(0, time.Second) != nil {
		t.Error("newBreaker(0, …) is enabled, want nil")
	}
}

// TestBreakerCountsRoundTripsEndingOutOfOrder: round trips in flight
// together fail in any order, and each counts once, so the breaker opens
// after as many failed round trips as it is set to, not as many waves.
func TestBreakerCountsRoundTripsEndingOutOfOrder(t *testing.T) {
	b := newBreaker(4, time.Minute)
	for _, rt := range []uint64{13, 11, 13, 12, 11} {
		b.record("a", rt, healthFailed, false)
	}
	if _, err := b.admit("a"); err != nil {
		t.Fatalf("after 3 failed round trips (5 calls) admit = %v, want closed", err)
	}
	b.record("a", 10, healthFailed, false)
	if _, err := b.admit("a"); !errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("after round trips 13, 11, 12 and 10 failed admit = %v, want ErrCircuitOpen", err)
	}
}

// TestLocalLimitsForgetsLeastRecent bounds FailLocal's memory.
func TestLocalLimitsForgetsLeastRecent(t *testing.T) {
	l := newLocalLimits([]Limit{Per(2, time.Minute)}, 1, 2)
	now := time.Now()
	for _, id := range []string{"a", "a", "b", "c"} {
		l.decide(id, 1, false, now)
	}
	if n := l.len(); n != 2 {
		t.Fatalf("remembered %d identities, want the capacity 2", n)
	}
	if res := l.decide("a", 1, false, now); !res.Allowed || res.Remaining != 1 {
		t.Fatalf("decide(a) after it was forgotten = %+v, want a fresh window", res)
	}
	if res := l.decide("c", 1, false, now); !res.Allowed || res.Remaining != 0 {
		t.Fatalf("decide(c) = %+v, want allowed with 0 left", res)
	}
	res := l.decide("c", 1, false, now.Add(10*time.Second))
	if res.Allowed || res.RetryAfter != 50*time.Second || !res.Fallback {
		t.Fatalf("decide(c) over the quota = %+v, want a fallback denial for 50s", res)
	}
	if res := l.decide("c", 1, false, now.Add(time.Minute+time.Millisecond)); !res.Allowed {
		t.Fatalf("decide(c) a window later = %+v, want allowed", res)
	}
	// A share of zero admits nothing.
	zero := newLocalLimits([]Limit{Per(2, time.Minute)}, 3, 10)
	if res := zero.decide("z", 1, false, now); res.Allowed || res.RetryAfter <= 0 {
		t.Fatalf("decide with a share of 0 = %+v, want denied", res)
	}
}

// TestDispatcherGoesWithItsLimiters makes limiters on clients that the test
// then drops: their dispatchers, and the registry's entries for them, go
// once the garbage collector has run, so a process that makes clients as it
// goes keeps none of them alive.
func TestDispatcherGoesWithItsLimiters(t *testing.T) {
	entries := func() int {
		n := 0
		dispatchers.Range(func(_, _ any) bool { n++; return true })
		return n
	}
	before := entries()
	func() {
		for range 20 {
			rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
			if _, err := New(rdb, PerMinute(5)); err != nil {
				t.Fatal(err)
			}
			_ = rdb.Close()
		}
	}()
	if got := entries(); got < before+20 {
		t.Fatalf("after 20 limiters on 20 clients the registry holds %d entries, want at least %d", got, before+20)
	}
	waitFor(t, "the dropped clients' dispatchers to go", func() bool {
		runtime.GC()
		return entries() <= before
	})
}

// TestDialOutlivesWhatWaitGrants opens a first connection for a round
// trip: the context go-redis dials with must not end before a whole
// busyAllowance past the most wait grants a busy process. wait counts only
// the time this process ran its timer, so a dial ended at the allowance
// itself was cut on a saturated host while wait still held the call (one
// fail-open decision in about 200 bursts of 1,000 requests, with four busy
// loops beside them).
func TestDialOutlivesWhatWaitGrants(t *testing.T) {
	const timeout = 50 * time.Millisecond
	deadlines := make(chan time.Time, 16) // each dial's deadline; zero for none
	rdb := redis.NewClient(&redis.Options{Addr: silentListener(t), MaxRetries: -1,
		ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			d, _ := ctx.Deadline()
			select {
			case deadlines <- d:
			default:
			}
			var dialer net.Dialer
			return dialer.DialContext(ctx, network, addr)
		}})
	t.Cleanup(func() { _ = rdb.Close() })
	lim, err := New(rdb, PerMinute(5), WithTimeout(timeout), WithFailurePolicy(FailClosed))
	if err != nil {
		t.Fatal(err)
	}
	// Every deadline is measured from before the call, so the time a busy
	// host takes between the call and its dial cannot hide a short one.
	before := time.Now()
	if res, err := lim.Allow(t.Context(), "dial"); !errors.Is(err, ErrUnavailable) || res.Allowed {
		t.Fatalf("Allow against a silent Redis = %+v, %v; want a fail-closed fallback", res, err)
	}
	close(deadlines)
	n := 0
	for d := range deadlines {
		n++
		if want := timeout + 2*busyAllowance; !d.IsZero() && d.Sub(before) < want {
			t.Errorf("a dial's context ended %v after the call began, want at least %v (or no deadline)", d.Sub(before), want)
		}
	}
	if n == 0 {
		t.Fatal("Allow opened no connection")
	}
}
