package adapter_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/adapter"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// TestMain gives the examples a Redis in REDIS_ADDR.
func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }

// job is what a queue consumer limits: a tenant's job of some cost.
type job struct {
	tenant string
	cost   int
}

// ExampleFlow is the whole of an adapter for a queue consumer: the flow
// decides, the adapter runs, requeues or drops the job.
func ExampleFlow() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()
	lim, err := slidelimit.New(rdb, slidelimit.Per(3, time.Minute), slidelimit.WithPrefix("example-flow:"))
	if err != nil {
		panic(err)
	}
	_ = lim.Reset(ctx, "tenant:acme") // start this example from a clean slate

	f := &adapter.Flow[job]{
		Name:    "joblimit",
		Limiter: lim,
		Key: func(j job) (string, error) {
			if j.tenant == "" {
				return "", errors.New("job has no tenant")
			}
			return "tenant:" + j.tenant, nil
		},
		Cost: func(j job) int { return j.cost },
		Hook: func(_ context.Context, _ job, err error) { fmt.Println("error:", err) },
	}
	for _, j := range []job{{"acme", 2}, {"acme", 2}, {"acme", 1}, {"", 1}} {
		switch d := f.Decide(ctx, j); d.Verdict {
		case adapter.Admit:
			fmt.Println("run; remaining", d.Result.Remaining)
		case adapter.Deny:
			fmt.Println("requeue; retry within", d.Result.RetryAfter.Round(time.Minute))
		case adapter.Fail:
			fmt.Println("drop")
		}
	}
	// Output:
	// run; remaining 1
	// requeue; retry within 1m0s
	// run; remaining 0
	// error: joblimit: key: job has no tenant
	// drop
}
