package slidelimit_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// BenchmarkWait measures Wait with 32 waiters per CPU on one identity, on a
// Redis of its own: "free" under a limit that never binds (the queue's own
// ceiling: one decision at a time per identity and process), "saturated"
// under 1,000 per second. It reports the Redis commands clients sent per
// admission (evalsha/op: AllowN's and the block's read) and the decisions
// per admission.
func BenchmarkWait(b *testing.B) {
	for _, bc := range []struct {
		name  string
		limit slidelimit.Limit
	}{
		{"free", slidelimit.PerMinute(slidelimit.MaxQuota)},
		{"saturated", slidelimit.Per(100, 100*time.Millisecond)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			srv := redistest.StartServer(b)
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
			b.Cleanup(func() { _ = rdb.Close() })
			count, decisions := countDecisions()
			lim, err := slidelimit.New(rdb, bc.limit, slidelimit.WithPrefix(redistest.Prefix(b)), count)
			if err != nil {
				b.Fatal(err)
			}
			before := evalshaCalls(b, rdb)
			b.SetParallelism(32)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if res, err := lim.Wait(b.Context(), "partner"); err != nil || !res.Allowed {
						b.Errorf("Wait = %+v, %v", res, err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(evalshaCalls(b, rdb)-before)/float64(b.N), "evalsha/op")
			b.ReportMetric(float64(decisions.Load())/float64(b.N), "decisions/op")
		})
	}
}

// evalshaCalls returns how many EVALSHA a server has run.
func evalshaCalls(b *testing.B, rdb *redis.Client) int64 {
	b.Helper()
	info, err := rdb.Info(b.Context(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:calls="); ok {
			calls, _, _ := strings.Cut(rest, ",")
			n, _ := strconv.ParseInt(calls, 10, 64)
			return n
		}
	}
	return 0
}
