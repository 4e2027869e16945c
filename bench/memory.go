package main

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/google/uuid"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/ulule/limiter/v3"
	ulredis "github.com/ulule/limiter/v3/drivers/store/redis"
)

func numCPU() int       { return runtime.NumCPU() }
func goVersion() string { return runtime.Version() }
func goos() string      { return runtime.GOOS }
func goarch() string    { return runtime.GOARCH }

// memorySizes are the in-window requests of one key measured: a listpack
// up to zset-max-listpack-entries (128 here), a skiplist above.
var memorySizes = []int{1, 128, 1000}

// memory prints the bytes one identity and one in-window request take.
func (b *bench) memory(ctx context.Context) error {
	fmt.Printf("\n== Redis memory (MEMORY USAGE ... SAMPLES 0, zset-max-listpack-entries 128)\n")
	fmt.Printf("%-12s %14s %22s %22s\n", "contender", "B/identity", "B/request (128, lp)", "B/request (1000, sl)")

	limit := slidelimit.PerHour(slidelimit.MaxExactQuota) // exact: one member per unit
	prefix := b.prefix("mem")
	lim, err := slidelimit.New(b.rdb, limit, slidelimit.WithPrefix(prefix), slidelimit.WithTimeout(10*time.Second))
	if err != nil {
		return err
	}
	ours := map[int]int64{}
	for _, k := range memorySizes {
		id := "m" + strconv.Itoa(k)
		for range k {
			res, err := lim.Allow(ctx, id)
			if err != nil {
				return fmt.Errorf("memory: Allow: %w", err)
			}
			if !res.Allowed {
				return fmt.Errorf("memory: Allow = %+v, want admitted", res)
			}
		}
		key, _ := slidelimit.Key(prefix, id, limit)
		if ours[k], err = b.usage(ctx, key); err != nil {
			return err
		}
	}
	classic := map[int]int64{}
	for _, k := range memorySizes {
		key := prefix + "classic:{m" + strconv.Itoa(k) + "}"
		for range k {
			now := time.Now().UnixMilli()
			member := strconv.FormatInt(now, 10) + "-" + uuid.NewString()
			if err := classicScript.Run(ctx, b.rdb, []string{key}, now, int64(time.Hour/time.Millisecond), slidelimit.MaxQuota, member).Err(); err != nil {
				return err
			}
		}
		if classic[k], err = b.usage(ctx, key); err != nil {
			return err
		}
	}
	perReq := func(u map[int]int64, k int) float64 { return float64(u[k]-u[1]) / float64(k-1) }
	fmt.Printf("%-12s %14d %22.1f %22.1f\n", "slidelimit", ours[1], perReq(ours, 128), perReq(ours, 1000))
	fmt.Printf("%-12s %14d %22.1f %22.1f\n", "classic", classic[1], perReq(classic, 128), perReq(classic, 1000))

	if _, err := redis_rate.NewLimiter(b.rdb).Allow(ctx, prefix+"rr", redis_rate.PerMinute(10)); err != nil {
		return err
	}
	rr, err := b.usage(ctx, "rate:"+prefix+"rr")
	if err != nil {
		return err
	}
	fmt.Printf("%-12s %14d %22s %22s\n", "redis_rate", rr, "(no per-request state)", "")

	store, err := ulredis.NewStoreWithOptions(b.rdb, limiter.StoreOptions{Prefix: prefix + "ul"})
	if err != nil {
		return err
	}
	if _, err := limiter.New(store, limiter.Rate{Period: time.Minute, Limit: 10}).Get(ctx, "u"); err != nil {
		return err
	}
	keys, err := b.rdb.Keys(ctx, prefix+"ul*").Result()
	if err != nil {
		return fmt.Errorf("memory: KEYS: %w", err)
	}
	if len(keys) != 1 {
		return fmt.Errorf("memory: ulule keys = %v, want one", keys)
	}
	ul, err := b.usage(ctx, keys[0])
	if err != nil {
		return err
	}
	fmt.Printf("%-12s %14d %22s %22s\n", "ulule", ul, "(no per-request state)", "")
	fmt.Println("(B/identity: a key holding one request; B/request = (usage(k) - usage(1)) / (k - 1); lp = listpack, sl = skiplist)")
	return nil
}

func (b *bench) usage(ctx context.Context, key string) (int64, error) {
	n, err := b.rdb.MemoryUsage(ctx, key, 0).Result()
	if err != nil {
		return 0, fmt.Errorf("MEMORY USAGE %s: %w", key, err)
	}
	return n, nil
}

// listpack measures memory and the script's Redis time per call for keys
// of 100, 500 and 1000 in-window requests at zset-max-listpack-entries
// 128, 512 and 1024. Each key is filled to its size less the probes, then
// probed in rounds of one admission per key; the time is the fastest
// round's usec_per_call (INFO commandstats), the least disturbed by the
// other processes on the machine.
func (b *bench) listpack(ctx context.Context) error {
	const keys, rounds, perRound = 20, 5, 10
	fmt.Printf("\n== zset-max-listpack-entries: memory against Redis time per admission of the allow script (%d keys each; fastest of %d rounds of %d admissions per key, INFO commandstats)\n", keys, rounds, perRound)
	fmt.Printf("%-8s %-9s %-9s %12s %16s\n", "entries", "requests", "encoding", "B/request", "µs per call")
	defer b.rdb.ConfigSet(ctx, "zset-max-listpack-entries", "128")
	limit := slidelimit.PerHour(slidelimit.MaxExactQuota)
	for _, entries := range []int{128, 512, 1024} {
		if err := b.rdb.ConfigSet(ctx, "zset-max-listpack-entries", strconv.Itoa(entries)).Err(); err != nil {
			return err
		}
		for _, size := range []int{100, 500, 1000} {
			prefix := b.prefix("lp")
			lim, err := slidelimit.New(b.rdb, limit, slidelimit.WithPrefix(prefix), slidelimit.WithTimeout(10*time.Second))
			if err != nil {
				return err
			}
			if err := parallel(keys*(size-rounds*perRound), 32, func(i int) error {
				_, err := lim.Allow(ctx, strconv.Itoa(i%keys))
				return err
			}); err != nil {
				return err
			}
			best := 0.0
			for range rounds {
				if err := b.rdb.ConfigResetStat(ctx).Err(); err != nil {
					return err
				}
				if err := parallel(keys*perRound, 4, func(i int) error {
					_, err := lim.Allow(ctx, strconv.Itoa(i%keys))
					return err
				}); err != nil {
					return err
				}
				stats, _ := b.rdb.Info(ctx, "commandstats").Result()
				for f := range strings.SplitSeq(infoField(stats, "cmdstat_evalsha"), ",") {
					if v, ok := strings.CutPrefix(f, "usec_per_call="); ok {
						if u, err := strconv.ParseFloat(v, 64); err == nil && (best == 0 || u < best) {
							best = u
						}
					}
				}
			}
			var total int64
			for i := range keys {
				key, _ := slidelimit.Key(prefix, strconv.Itoa(i), limit)
				u, err := b.usage(ctx, key)
				if err != nil {
					return err
				}
				total += u
			}
			key0, _ := slidelimit.Key(prefix, "0", limit)
			enc, _ := b.rdb.ObjectEncoding(ctx, key0).Result()
			fmt.Printf("%-8d %-9d %-9s %12.1f %16.2f\n", entries, size, enc, float64(total)/float64(keys*size), best)
		}
	}
	fmt.Println("(B/request = MEMORY USAGE / requests, key overhead included)")
	return nil
}

// parallel calls f(0..n-1) from g goroutines.
func parallel(n, g int, f func(i int) error) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	next := make(chan int)
	for range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return first
}
