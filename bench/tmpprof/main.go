package main

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
)

func main() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("SLIDELIMIT_REDIS_ADDR"), ContextTimeoutEnabled: true})
	lim, _ := slidelimit.New(rdb, slidelimit.PerMinute(1000000), slidelimit.WithPrefix("prof:"))
	ctx := context.Background()
	var n atomic.Int64
	f, _ := os.Create("/tmp/wire.prof")
	pprof.StartCPUProfile(f)
	deadline := time.Now().Add(5 * time.Second)
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			i := 0
			for time.Now().Before(deadline) {
				lim.Allow(ctx, fmt.Sprintf("id-%d-%d", g, i%16))
				i++
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	pprof.StopCPUProfile()
	fmt.Println(n.Load()/5, "decisions/s")
}
