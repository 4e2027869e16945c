package httplimit_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/httplimit"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// shadowDenials counts the shadow denials a limiter observes.
type shadowDenials struct{ n atomic.Int64 }

func (s *shadowDenials) observe(_ context.Context, o slidelimit.Observation) {
	if o.Outcome() == slidelimit.OutcomeShadowDenied {
		s.n.Add(1)
	}
}

// TestShadow sends six requests against a limit of five: in shadow mode all
// six pass, the sixth without quota fields, and the observer sees one
// shadow denial; without shadow mode the sixth is refused.
func TestShadow(t *testing.T) {
	rdb := redistest.Client(t)
	limit := slidelimit.Per(5, 10*time.Second)
	for _, shadow := range []bool{true, false} {
		var seen shadowDenials
		opts := []slidelimit.Option{slidelimit.WithObserver(seen.observe)}
		if shadow {
			opts = append(opts, slidelimit.WithShadow())
		}
		h := httplimit.New(newLimiter(t, rdb, limit, opts...))(ok)
		for i := range 6 {
			w := get(h, "/", "192.0.2.1:1234")
			want := http.StatusOK
			if i == 5 && !shadow {
				want = http.StatusTooManyRequests
			}
			if w.Code != want {
				t.Fatalf("shadow %v: request %d = %d, want %d", shadow, i+1, w.Code, want)
			}
			quota := w.Header().Get(slidelimit.FieldRateLimit) != "" || w.Header().Get(slidelimit.FieldXRateLimitRemaining) != ""
			if wantQuota := i < 5 || !shadow; quota != wantQuota {
				t.Errorf("shadow %v: request %d has quota fields %v, want %v: %v", shadow, i+1, quota, wantQuota, w.Header())
			}
			if i == 5 && shadow && w.Header().Get(slidelimit.FieldRetryAfter) != "" {
				t.Errorf("shadow denial has Retry-After %q, want none", w.Header().Get(slidelimit.FieldRetryAfter))
			}
		}
		if got, want := seen.n.Load(), map[bool]int64{true: 1, false: 0}[shadow]; got != want {
			t.Errorf("shadow %v: observer saw %d shadow denials, want %d", shadow, got, want)
		}
	}
}
