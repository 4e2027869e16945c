package slidelimit_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// BenchmarkRedisCost measures what one admission costs Redis, in µs of
// its own accounting (INFO commandstats: the scripts' usec per call), on
// a private server, one caller, a fresh identity a call:
//   - exact cost 1 and exact cost 900 under PerMinute(1000): an exact log
//     holds a request as one member whatever its cost;
//   - a tenant's tree of three levels (AllowTree) against the same nine
//     limits on one identity (AllowLimits): what a tree adds;
//   - stepped cost 1 and cost 1,000 under PerDay(10^9), one identity
//     whose log lives on (a stepped log is made once a window, not a
//     call): what keeping each request's id by time adds.
func BenchmarkRedisCost(b *testing.B) {
	srv := redistest.StartServer(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	b.Cleanup(func() { _ = rdb.Close() })
	ctx := b.Context()
	lim, err := slidelimit.New(rdb, slidelimit.PerMinute(1000), slidelimit.WithTimeout(10*time.Second),
		slidelimit.WithDenyCache(0), slidelimit.WithPrefix(redistest.Prefix(b)))
	if err != nil {
		b.Fatal(err)
	}
	level := func(name string) []slidelimit.Limit {
		return []slidelimit.Limit{
			slidelimit.PerMinute(60).ForRequests().Named(name + "-rpm"),
			slidelimit.PerMinute(100_000).Named(name + "-tpm"),
			slidelimit.InFlight(8, time.Minute).Named(name + "-in-flight"),
		}
	}
	var flat []slidelimit.Limit
	var tree []slidelimit.Level
	for i, name := range []string{"org", "team", "key"} {
		flat = append(flat, level(name)...)
		id := ""
		if i > 0 {
			id = name + ":1"
		}
		tree = append(tree, slidelimit.Level{Identity: id, Limits: level(name)})
	}
	day, err := slidelimit.New(rdb, slidelimit.PerDay(1_000_000_000), slidelimit.WithTimeout(10*time.Second),
		slidelimit.WithDenyCache(0), slidelimit.WithPrefix(redistest.Prefix(b)))
	if err != nil {
		b.Fatal(err)
	}
	run := 0
	for _, c := range []struct {
		name  string
		allow func(ctx context.Context, id string) (slidelimit.Result, error)
	}{
		{"exact/cost=1", func(ctx context.Context, id string) (slidelimit.Result, error) { return lim.AllowN(ctx, id, 1) }},
		{"exact/cost=900", func(ctx context.Context, id string) (slidelimit.Result, error) { return lim.AllowN(ctx, id, 900) }},
		{"flat/9-limits", func(ctx context.Context, id string) (slidelimit.Result, error) {
			return lim.AllowLimits(ctx, id, 100, flat...)
		}},
		{"tree/3-levels", func(ctx context.Context, id string) (slidelimit.Result, error) {
			return lim.AllowTree(ctx, id, 100, tree...)
		}},
		{"stepped/cost=1", func(ctx context.Context, _ string) (slidelimit.Result, error) {
			return day.AllowN(ctx, "day-1/"+strconv.Itoa(run), 1)
		}},
		{"stepped/cost=1000", func(ctx context.Context, _ string) (slidelimit.Result, error) {
			return day.AllowN(ctx, "day-1000/"+strconv.Itoa(run), 1000)
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			run++ // a fresh identity a call, across runs too
			if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			for i := range b.N {
				if res, err := c.allow(ctx, c.name+strconv.Itoa(run)+"/"+strconv.Itoa(i)); err != nil || !res.Allowed {
					b.Fatalf("%s = %+v, %v; want admitted", c.name, res, err)
				}
			}
			info, err := rdb.Info(ctx, "commandstats").Result()
			if err != nil {
				b.Fatal(err)
			}
			var usec, calls float64
			for _, line := range strings.Split(info, "\n") {
				if !strings.HasPrefix(line, "cmdstat_evalsha:") && !strings.HasPrefix(line, "cmdstat_eval:") {
					continue
				}
				for _, f := range strings.Split(strings.TrimSpace(line[strings.IndexByte(line, ':')+1:]), ",") {
					k, v, _ := strings.Cut(f, "=")
					n, _ := strconv.ParseFloat(v, 64)
					switch k {
					case "calls":
						calls += n
					case "usec":
						usec += n
					}
				}
			}
			b.ReportMetric(usec/max(calls, 1), "redis-µs/decision")
		})
	}
}
