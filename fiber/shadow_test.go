package fiberlimit_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"

	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
	fiberlimit "github.com/slidelimit/slidelimit/fiber"
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
	for _, shadow := range []bool{true, false} {
		var seen shadowDenials
		opts := []slidelimit.Option{slidelimit.WithObserver(seen.observe)}
		if shadow {
			opts = append(opts, slidelimit.WithShadow())
		}
		app := newApp()
		app.Get("/", fiberlimit.New(newLimiter(t, rdb, per5, opts...)), ok)
		c := serve(t, app)
		for i := range 6 {
			r := c.get("/")
			want := http.StatusOK
			if i == 5 && !shadow {
				want = http.StatusTooManyRequests
			}
			if r.status != want {
				t.Fatalf("shadow %v: request %d = %d, want %d", shadow, i+1, r.status, want)
			}
			if i == 5 && shadow {
				noQuotaHeaders(t, "shadow denial", r)
				if v := r.header.Get(slidelimit.FieldRetryAfter); v != "" {
					t.Errorf("shadow denial has Retry-After %q, want none", v)
				}
			} else if r.header.Get(slidelimit.FieldRateLimit) == "" {
				t.Errorf("shadow %v: request %d has no %s field", shadow, i+1, slidelimit.FieldRateLimit)
			}
		}
		if got, want := seen.n.Load(), map[bool]int64{true: 1, false: 0}[shadow]; got != want {
			t.Errorf("shadow %v: observer saw %d shadow denials, want %d", shadow, got, want)
		}
	}
}
