package slidelimit_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
)

// A worker waits for its turn under a partner's quota instead of failing,
// and gives up at once when its deadline cannot be met.
func ExampleLimiter_Wait() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()

	// The partner allows 2 calls per second, shared by every worker.
	lim, err := slidelimit.New(rdb, slidelimit.Per(2, time.Second), slidelimit.WithPrefix("example-wait:"))
	if err != nil {
		panic(err)
	}
	_ = lim.Reset(ctx, "partner")

	start := time.Now()
	for range 4 {
		if _, err := lim.Wait(ctx, "partner"); err != nil {
			fmt.Println("not sent:", err)
			return
		}
	}
	fmt.Println("the last two calls waited for the window:", time.Since(start) >= 900*time.Millisecond)

	// The window is full again: a call that may wait only 100 ms is
	// refused at once.
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = lim.Wait(short, "partner")
	fmt.Println(errors.Is(err, slidelimit.ErrWouldExceedDeadline), errors.Is(err, context.DeadlineExceeded))
	// Output:
	// the last two calls waited for the window: true
	// true true
}

// A partner's Retry-After, recorded once, pauses every worker of every
// process that waits on the same identity.
func ExampleLimiter_Block() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()
	lim, err := slidelimit.New(rdb, slidelimit.PerMinute(600), slidelimit.WithPrefix("example-block:"))
	if err != nil {
		panic(err)
	}

	// The partner answered 429 with Retry-After: 2.
	if err := lim.Block(ctx, "partner", 2*time.Second); err != nil {
		fmt.Println("block not recorded:", err)
	}
	left, _ := lim.Blocked(ctx, "partner")
	fmt.Println("blocked for about", left.Round(time.Second))
	// Output:
	// blocked for about 2s
}
