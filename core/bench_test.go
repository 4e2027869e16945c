package slidelimit_test

import (
	"strconv"
	"testing"
	"time"

	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// BenchmarkAllow measures one goroutine's Allow against the test Redis,
// with -benchmem the allocations of a decision, go-redis's included:
// admitted (a quota no run reaches) and denied from the deny cache.
func BenchmarkAllow(b *testing.B) {
	rdb := redistest.Client(b)
	b.Run("admitted", func(b *testing.B) {
		lim, err := slidelimit.New(rdb, slidelimit.PerMinute(slidelimit.MaxQuota),
			slidelimit.WithPrefix(redistest.Prefix(b)), slidelimit.WithTimeout(10*time.Second))
		if err != nil {
			b.Fatal(err)
		}
		ids := make([]string, 1000)
		for i := range ids {
			ids[i] = strconv.Itoa(i)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			if res, err := lim.Allow(b.Context(), ids[i%len(ids)]); err != nil || !res.Allowed {
				b.Fatalf("Allow = %+v, %v, want admitted", res, err)
			}
		}
	})
	b.Run("cached-denial", func(b *testing.B) {
		lim, err := slidelimit.New(rdb, slidelimit.PerHour(1), slidelimit.WithPrefix(redistest.Prefix(b)))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = lim.Allow(b.Context(), "x")
		_, _ = lim.Allow(b.Context(), "x")
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			if res, err := lim.Allow(b.Context(), "x"); err != nil || !res.Cached {
				b.Fatalf("Allow = %+v, %v, want a cached denial", res, err)
			}
		}
	})
}
