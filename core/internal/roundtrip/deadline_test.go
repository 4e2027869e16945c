package roundtrip

import (
	"context"
	"errors"
	"testing"
	"time"
)

type testKey struct{}

func TestDeadlinesWithin(t *testing.T) {
	var ds deadlines
	const timeout = 640 * time.Millisecond
	parent := context.WithValue(context.Background(), testKey{}, "v")
	now := time.Now()
	ctx := ds.within(parent, now, timeout)
	at, ok := ctx.Deadline()
	if !ok || at.After(now.Add(timeout)) || at.Before(now.Add(timeout-timeout/deadlineSlack)) {
		t.Fatalf("Deadline() = %v, %v; want within %v of %v", at.Sub(now), ok, timeout/deadlineSlack, timeout)
	}
	if got := ctx.Value(testKey{}); got != "v" {
		t.Fatalf("Value = %v, want the caller's value", got)
	}

	// A call made a little later shares the deadline, and so its timer,
	// while the deadline stays within the slack of its own timeout.
	later := now.Add(timeout / deadlineSlack / 2)
	if at2, _ := ds.within(parent, later, timeout).Deadline(); !at2.Equal(at) {
		t.Errorf("a call %v later got deadline %v, want the shared %v", later.Sub(now), at2.Sub(now), at.Sub(now))
	}
	// Later than the slack, or with another timeout, it gets its own.
	for _, c := range []struct {
		now     time.Time
		timeout time.Duration
	}{
		{now.Add(-time.Millisecond), timeout}, // the shared one would end too late
		{now.Add(2 * timeout / deadlineSlack), timeout},
		{now, timeout / 2},
	} {
		at3, _ := ds.within(parent, c.now, c.timeout).Deadline()
		if want := c.now.Add(c.timeout); at3.After(want) || at3.Before(want.Add(-c.timeout/deadlineSlack)) {
			t.Errorf("within(%v, %v): deadline %v, want within the slack of %v", c.now.Sub(now), c.timeout, at3.Sub(c.now), c.timeout)
		}
	}

	// A caller's sooner deadline stands.
	soon, cancel := context.WithTimeout(parent, timeout/4)
	defer cancel()
	if got := ds.within(soon, time.Now(), timeout); got != soon {
		t.Errorf("within a sooner deadline returned %v, want the caller's context", got)
	}
}

func TestDeadlinesWithinEnds(t *testing.T) {
	var ds deadlines
	const timeout = 30 * time.Millisecond
	caller, cancel := context.WithCancel(context.WithValue(context.Background(), testKey{}, 1))
	defer cancel()
	for _, parent := range []context.Context{context.Background(), caller} {
		start := time.Now()
		within := ds.within(parent, start, timeout)
		// A context derived from it ends with it, whatever the caller's does.
		ctx, stop := context.WithCancel(within)
		defer stop()
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the context did not end")
		}
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			t.Errorf("Err() = %v, want DeadlineExceeded", ctx.Err())
		}
		for _, c := range []context.Context{within, ctx} {
			if cause := context.Cause(c); !errors.Is(cause, context.DeadlineExceeded) {
				t.Errorf("Cause() = %v, want DeadlineExceeded", cause)
			}
		}
		if el := time.Since(start); el < timeout-timeout/deadlineSlack {
			t.Errorf("the context ended after %v, before its deadline", el)
		}
	}
}
