package slidelimit_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// BenchmarkScriptCallDuration measures, with Redis's SLOWLOG on a private
// server, how long the script calls of a burst keep Redis busy: 64
// callers, each making b.N decisions over 4 identities of its own. It
// reports the longest and the mean script call in µs, and the decisions
// per script call (batching). Run it with a fixed count, as make bench
// does: go test -run '^$' -bench ScriptCallDuration -benchtime 40x.
func BenchmarkScriptCallDuration(b *testing.B) {
	srv := redistest.StartServer(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, PoolSize: 64})
	b.Cleanup(func() { _ = rdb.Close() })
	ctx := b.Context()
	for _, c := range []struct {
		name  string
		cost  int
		limit slidelimit.Limit
	}{
		{"exact/cost=1", 1, slidelimit.PerMinute(1000)},
		{"exact/cost=900", 900, slidelimit.PerMinute(1000)},
		{"stepped/cost=1000", 1000, slidelimit.PerDay(100_000)},
	} {
		b.Run(c.name, func(b *testing.B) {
			lim, err := slidelimit.New(rdb, c.limit, slidelimit.WithTimeout(10*time.Second), slidelimit.WithPrefix(redistest.Prefix(b)))
			if err != nil {
				b.Fatal(err)
			}
			for _, cmd := range [][]any{{"CONFIG", "SET", "slowlog-log-slower-than", "0"}, {"CONFIG", "SET", "slowlog-max-len", "1000000"}, {"SLOWLOG", "RESET"}} {
				if err := rdb.Do(ctx, cmd...).Err(); err != nil {
					b.Fatal(err)
				}
			}
			const callers = 64
			var wg sync.WaitGroup
			for w := range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range b.N {
						_, _ = lim.AllowN(ctx, fmt.Sprintf("id%d-%d", w, i%4), c.cost)
					}
				}()
			}
			wg.Wait()
			logs, err := rdb.SlowLogGet(ctx, 1_000_000).Result()
			if err != nil {
				b.Fatal(err)
			}
			var most, total time.Duration
			n := 0
			for _, l := range logs {
				if len(l.Args) > 0 && (l.Args[0] == "evalsha" || l.Args[0] == "eval") {
					most, total, n = max(most, l.Duration), total+l.Duration, n+1
				}
			}
			b.ReportMetric(float64(most.Microseconds()), "longest-µs")
			b.ReportMetric(float64(total.Microseconds())/float64(max(n, 1)), "mean-µs")
			b.ReportMetric(float64(callers*b.N)/float64(max(n, 1)), "decisions/call")
		})
	}
}
