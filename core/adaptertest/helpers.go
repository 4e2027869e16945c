package adaptertest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// NewLimiter returns a limiter of limit on rdb, for a test of an adapter:
// under a key prefix of t's own (redistest.Prefix, cut to the 64 bytes a
// prefix may have), with a timeout long enough for a loaded machine, so
// that no decision falls back to the failure policy, and opts after
// those.
func NewLimiter(t testing.TB, rdb redis.Scripter, limit slidelimit.Limit, opts ...slidelimit.Option) *slidelimit.Limiter {
	t.Helper()
	p := redistest.Prefix(t)
	if len(p) > 64 {
		p = p[:40] + p[len(p)-24:]
	}
	opts = append([]slidelimit.Option{slidelimit.WithPrefix(p), slidelimit.WithTimeout(10 * time.Second)}, opts...)
	lim, err := slidelimit.New(rdb, limit, opts...)
	if err != nil {
		t.Fatalf("slidelimit.New(%v): %v", limit, err)
	}
	return lim
}

// Send sends r to srv n times, one after the other, and returns the
// statuses.
func Send(t testing.TB, srv Server, n int, r Request) []int {
	t.Helper()
	out := make([]int, n)
	for i := range out {
		out[i] = srv(t, r).Status
	}
	return out
}

// Statuses returns n times status followed by more, the statuses Send
// should return: Statuses(5, 200, 429) for five admissions and a denial.
func Statuses(n, status int, more ...int) []int {
	out := make([]int, 0, n+len(more))
	for range n {
		out = append(out, status)
	}
	return append(out, more...)
}

// ErrorLog records the errors an adapter's error hook receives; its Hook
// method is the hook. It is safe for concurrent use.
type ErrorLog struct {
	mu   sync.Mutex
	errs []error
}

// Hook records err.
func (l *ErrorLog) Hook(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, err)
}

// Take returns the errors recorded since the last Take.
func (l *ErrorLog) Take() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	errs := l.errs
	l.errs = nil
	return errs
}

// Observed records the identities a limiter is asked about; its Observe
// method is a slidelimit.Observer (slidelimit.WithObserver). It is safe
// for concurrent use.
type Observed struct {
	mu  sync.Mutex
	ids []string
}

// Observe records o's identity.
func (o *Observed) Observe(_ context.Context, ob slidelimit.Observation) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ids = append(o.ids, ob.Identity)
}

// Identities returns the identities observed, in order.
func (o *Observed) Identities() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.ids...)
}
