package slidelimit

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// outage reports a Limiter's outages, the spans in which Redis could not
// decide and the FailurePolicy did: once when one begins, with its first
// error, and once when it ends, with how many decisions the policy made and
// for how long. Its cost while Redis decides is one atomic load a call. It
// is safe for concurrent use.
type outage struct {
	log    *slog.Logger // nil: report nothing
	policy FailurePolicy
	down   atomic.Bool

	mu        sync.Mutex
	since     time.Time
	fallbacks int64
}

// observe counts a decision that returned err: one that Redis made (err
// nil, not a cached denial), or a fallback (err wraps ErrUnavailable).
func (o *outage) observe(ctx context.Context, res Result, err error) {
	switch {
	case err == nil && !res.Cached && !o.down.Load():
		return // the common case: Redis decides, as it did
	case err == nil && !res.Cached:
		o.mu.Lock()
		if !o.down.Load() {
			o.mu.Unlock()
			return
		}
		o.down.Store(false)
		n, d := o.fallbacks, time.Since(o.since)
		o.mu.Unlock()
		if o.log != nil {
			o.log.InfoContext(ctx, "slidelimit: Redis decides again",
				"policy", o.policy.String(), "fallbacks", n, "outage", d.Round(time.Millisecond))
		}
	case errors.Is(err, ErrUnavailable):
		o.mu.Lock()
		began := !o.down.Load()
		if began {
			o.down.Store(true)
			o.since, o.fallbacks = time.Now(), 0
		}
		o.fallbacks++
		o.mu.Unlock()
		if began && o.log != nil {
			o.log.WarnContext(ctx, "slidelimit: Redis cannot decide; the failure policy does until it can",
				"policy", o.policy.String(), "err", err)
		}
	}
}
