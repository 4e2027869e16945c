package integration

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// The benchmark's key pattern: benchPrefix + "{" + a 12-digit identity below
// benchKeyspace + "}:" + benchLimit.String(), that is
// bench:go:{000000012345}:1000000/1m. The quota is so large that every
// call is admitted, so every call writes.
const (
	benchPrefix   = "bench:go:"
	benchKeyspace = 100_000
)

var benchLimit = slidelimit.Per(slidelimit.MaxQuota, time.Minute)

// BenchmarkAllow measures Allow against the harness's standalone Redis from
// 1, 16, 64 and 256 goroutines, each level with a connection pool of that
// many connections (as redis-benchmark -c opens that many clients), and
// reports decisions per second. Run it with go test -bench BenchmarkAllow
// -benchtime 30000x under scripts/with-redis.sh. make bench (the bench
// module) measures the same beside the peer libraries and redis-benchmark.
//
// It runs twice: with a client built with ContextTimeoutEnabled, which the
// limiter calls directly, and with a default client, for which the limiter
// waits on a goroutine of its own so that its timeout still holds.
func BenchmarkAllow(b *testing.B) {
	addr := redistest.Client(b).Options().Addr
	for _, client := range []string{"ctxtimeout", "default"} {
		for _, g := range []int{1, 16, 64, 256} {
			b.Run(fmt.Sprintf("client=%s/goroutines=%d", client, g), func(b *testing.B) {
				benchAllow(b, addr, g, client == "ctxtimeout")
			})
		}
	}
}

// benchAllow runs BenchmarkAllow's body for g goroutines.
func benchAllow(b *testing.B, addr string, g int, ctxTimeout bool) {
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: g, ContextTimeoutEnabled: ctxTimeout})
	b.Cleanup(func() { _ = rdb.Close() })
	lim, err := slidelimit.New(rdb, benchLimit,
		slidelimit.WithPrefix(benchPrefix), slidelimit.WithTimeout(10*time.Second))
	if err != nil {
		b.Fatalf("slidelimit.New(%v) = %v", benchLimit, err)
	}
	// Open every connection and load the script before timing.
	var wg sync.WaitGroup
	for range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := lim.Peek(b.Context(), benchIdentity()); err != nil {
				b.Errorf("Peek = %v", err)
			}
		}()
	}
	wg.Wait()

	var next, failed atomic.Int64
	var firstErr atomic.Value
	b.ResetTimer()
	start := time.Now()
	for range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				res, err := lim.Allow(b.Context(), benchIdentity())
				if err == nil && !res.Allowed {
					err = fmt.Errorf("denied under a quota of %d", benchLimit.Quota)
				}
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d of %d calls were not admitted by Redis; first: %v", n, b.N, firstErr.Load())
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
}

// benchIdentity returns a random identity in the form redis-benchmark's
// __rand_int__ takes: 12 digits, zero-padded.
func benchIdentity() string {
	return fmt.Sprintf("%012d", rand.IntN(benchKeyspace))
}
