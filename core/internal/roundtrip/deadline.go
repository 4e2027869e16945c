package roundtrip

import (
	"context"
	"sync/atomic"
	"time"
)

// deadlineSlack is how much sooner than asked, as a fraction of the
// timeout, a deadline from deadlines.within may end: 1/64.
const deadlineSlack = 64

// deadlines hands the round trips of one lane the contexts that bound
// Redis's answer, sharing one timer among calls made close together. A
// context.WithTimeout per call costs a timer, a channel and four more
// allocations, about a microsecond of a lone caller's 60 on a small host;
// here a call takes a shared context that ends at most timeout/64 before
// its own timeout would, and so at most 64 timers per timeout are live.
type deadlines struct {
	cur atomic.Pointer[deadline]
}

// deadline is a context that ends at a fixed time, for calls of one timeout.
type deadline struct {
	ctx     context.Context
	cancel  context.CancelFunc // kept so the context can be ended early, as vet asks; its timer ends it
	at      time.Time
	timeout time.Duration
}

// within returns a context that carries ctx's values and ends timeout
// after now, or up to timeout/deadlineSlack sooner, or when ctx's own
// deadline passes if that is sooner still. Its Done, Err and Deadline agree
// with one another; ctx being canceled does not end it (go-redis, given a
// client that bounds its I/O by the context, reads only the deadline while
// a command is on the wire, and the caller leaves on its own context).
func (ds *deadlines) within(ctx context.Context, now time.Time, timeout time.Duration) context.Context {
	want := now.Add(timeout)
	if at, ok := ctx.Deadline(); ok && !at.After(want) {
		return ctx
	}
	d := ds.cur.Load()
	if d == nil || d.timeout != timeout || d.at.After(want) || want.Sub(d.at) > timeout/deadlineSlack {
		nd := &deadline{at: want, timeout: timeout}
		nd.ctx, nd.cancel = context.WithDeadline(context.Background(), want)
		ds.cur.Store(nd)
		d = nd
	}
	if ctx == context.Background() {
		return d.ctx
	}
	return valuesFrom{Context: d.ctx, values: ctx}
}

// valuesFrom is a context whose values are another context's.
type valuesFrom struct {
	context.Context
	values context.Context
}

// Value returns the value of key in c.values.
func (c valuesFrom) Value(key any) any {
	return c.values.Value(key)
}
