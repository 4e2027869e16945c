package httplimit_test

import (
	"net/http"
	"testing"

	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/adaptertest"
	"github.com/slidelimit/slidelimit/core/httplimit"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// BenchmarkMiddleware serves GET / bare and behind the middleware (every
// request admitted, against the test Redis): with -benchmem, the difference
// in allocs/op is what the limiter adds, go-redis included.
func BenchmarkMiddleware(b *testing.B) {
	lim := adaptertest.NewLimiter(b, redistest.Client(b), slidelimit.PerMinute(slidelimit.MaxQuota))
	for _, tc := range []struct {
		name string
		h    http.Handler
	}{{"bare", ok}, {"limited", httplimit.New(lim)(ok)}} {
		b.Run(tc.name, func(b *testing.B) { adaptertest.Benchmark(b, tc.h) })
	}
}

// TestMiddlewareAllocations pins what the middleware costs an admitted
// request beyond net/http's own: at most adaptertest.MaxAddedAllocs, Redis's
// round trip through go-redis included.
func TestMiddlewareAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's sync.Pool drops items at random")
	}
	lim := adaptertest.NewLimiter(t, redistest.Client(t), slidelimit.PerMinute(slidelimit.MaxQuota))
	adaptertest.Allocations(t, ok, httplimit.New(lim)(ok))
}
