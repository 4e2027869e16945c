package roundtrip

import (
	"context"
	"errors"
	"net"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slidelimit/slidelimit/core/internal/script"
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

// command returns a command of the allow script on key, for a Redis that
// never answers it.
func command(key string) script.Command {
	return append(script.NewCommand(1, 1), key, 1)
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
// a queue of two: the next call fails at once with errQueueFull, and says
// nothing to the breaker.
func TestQueueFull(t *testing.T) {
	// Short socket timeouts end the silent round trip soon after the callers
	// leave; newer go-redis versions first wait on their connection set-up
	// (HELLO) for a whole ReadTimeout, 3 s by default, more than once.
	rdb := redis.NewClient(&redis.Options{Addr: silentListener(t), MaxRetries: -1,
		ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	c := New(rdb, Config{Timeout: time.Minute, BreakerFailures: 1, BreakerCooldown: time.Minute})
	d := c.disp
	d.maxInFlight, d.maxBatch, d.maxQueue = 1, 1, 2
	ctx, cancel := context.WithCancel(t.Context())
	left := make(chan error, 3)
	for range 3 {
		go func() {
			_, err := c.Decide(ctx, command("q"))
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
	if _, err := c.Decide(t.Context(), command("q")); !errors.Is(err, errQueueFull) {
		t.Fatalf("Decide with the queue full = %v, want errQueueFull", err)
	}
	t.Logf("a call meeting a full queue was decided in %v", time.Since(start))
	if _, err := c.brk.admit(""); err != nil {
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
	go func() { first <- d.do(ctx, "", command("k"), time.Minute) }()
	waitFor(t, "the lone call in flight", func() bool { n, _ := lane(); return n == 1 })
	second := make(chan outcome, 1)
	go func() { second <- d.do(t.Context(), "", command("k"), time.Minute) }()
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
// Redis that never answers: each fails once the Caller's timeout passes,
// long before the client's own ReadTimeout, and counts as a failed round
// trip, so the breaker opens.
func TestDirectCallKeepsTheTimeout(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: silentListener(t), MaxRetries: -1, ContextTimeoutEnabled: true,
		ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	t.Cleanup(func() { _ = rdb.Close() })
	c := New(rdb, Config{Timeout: 50 * time.Millisecond, BreakerFailures: 2, BreakerCooldown: time.Minute})
	if !c.disp.bounded {
		t.Fatal("a client with ContextTimeoutEnabled is not taken as giving up at a deadline")
	}
	// As if the node had answered before: a lone call to a node never
	// answered goes through a round trip that allows for dialing.
	c.disp.lane("").answered.Store(time.Now().UnixNano())
	for i := range 2 {
		start := time.Now()
		if _, err := c.Decide(t.Context(), command("d")); !isTimeout(err) {
			t.Fatalf("lone Decide #%d to a silent Redis = %v; want a timeout", i+1, err)
		}
		// The bound is the client's ReadTimeout, which the call must not wait for.
		if took := time.Since(start); took > 30*time.Second {
			t.Fatalf("lone Decide #%d took %v: it waited for the client's ReadTimeout", i+1, took)
		}
	}
	if _, err := c.brk.admit(""); !errors.Is(err, ErrCircuitOpen) {
		t.Errorf("after two lone calls timed out the breaker = %v, want open", err)
	}
}

// TestDispatcherGoesWithItsCallers makes Callers on clients that the test
// then drops: their dispatchers, and the registry's entries for them, go
// once the garbage collector has run, so a process that makes clients as it
// goes keeps none of them alive.
func TestDispatcherGoesWithItsCallers(t *testing.T) {
	entries := func() int {
		n := 0
		dispatchers.Range(func(_, _ any) bool { n++; return true })
		return n
	}
	before := entries()
	func() {
		// Held until counted: a collection during the loop may take a
		// dropped Caller's entry, and an earlier test's, at any time.
		callers := make([]*Caller, 0, 20)
		for range 20 {
			rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
			callers = append(callers, New(rdb, Config{}))
			_ = rdb.Close()
		}
		if got := entries(); got < len(callers) {
			t.Fatalf("with 20 Callers on 20 clients the registry holds %d entries, want at least 20", got)
		}
		runtime.KeepAlive(callers)
	}()
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
	c := New(rdb, Config{Timeout: timeout})
	// Every deadline is measured from before the call, so the time a busy
	// host takes between the call and its dial cannot hide a short one.
	before := time.Now()
	if _, err := c.Decide(t.Context(), command("dial")); err == nil {
		t.Fatal("Decide against a silent Redis succeeded, want an error")
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
		t.Fatal("Decide opened no connection")
	}
}

// TestFailedRoundTripDecidesOnlyWhatItsSilenceOutlasts ends a round trip
// after which Redis had been silent 25 ms, with calls of several timeouts
// waiting: those of 20 and 25 ms are decided at once, since Redis was
// silent for their whole timeout; those of 10 s, 30 ms and of no timeout
// stay and leave in the next batch. An answer from Redis since shortens the
// silence that counts.
func TestFailedRoundTripDecidesOnlyWhatItsSilenceOutlasts(t *testing.T) {
	timeouts := []time.Duration{20 * time.Millisecond, 10 * time.Second, 0, 25 * time.Millisecond, 30 * time.Millisecond, 20 * time.Millisecond}
	fill := func() (*lane, []*call) {
		ln := &lane{d: &dispatcher{maxBatch: maxBatch, maxInFlight: 1, maxQueue: maxQueue}}
		ln.inFlight = 1
		var calls []*call
		for _, timeout := range timeouts {
			c := &call{timeout: timeout, out: make(chan outcome, 1)}
			calls = append(calls, c)
			ln.queue = append(ln.queue, c)
		}
		return ln, calls
	}

	ln, calls := fill()
	batch := ln.next(25 * time.Millisecond)
	var sentTimeouts []time.Duration
	for _, c := range batch {
		sentTimeouts = append(sentTimeouts, c.timeout)
	}
	if want := []time.Duration{10 * time.Second, 0, 30 * time.Millisecond}; !slices.Equal(sentTimeouts, want) {
		t.Errorf("after 25 ms of silence the next batch holds calls of timeouts %v, want %v", sentTimeouts, want)
	}
	for _, c := range calls {
		decided := false
		select {
		case o := <-c.out:
			decided = true
			if !errors.Is(o.err, errNodeFailed) || o.h != healthUnknown {
				t.Errorf("a waiting call of %v got %v (health %v), want errNodeFailed saying nothing of Redis", c.timeout, o.err, o.h)
			}
		default:
		}
		if want := c.timeout == 20*time.Millisecond || c.timeout == 25*time.Millisecond; decided != want {
			t.Errorf("after 25 ms of silence a waiting call of %v decided = %v, want %v", c.timeout, decided, want)
		}
	}

	ln, calls = fill()
	ln.answered.Store(time.Now().UnixNano())
	if batch := ln.next(25 * time.Millisecond); len(batch) != len(calls) {
		t.Errorf("with Redis answering just now, the next batch holds %d of %d waiting calls, want all", len(batch), len(calls))
	}
}
