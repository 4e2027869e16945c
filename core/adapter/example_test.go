package adapter_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
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
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
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

// task is a job whose actual cost is known once it has run.
type task struct {
	tenant   string
	estimate int
	work     int // what running it will use; 0: it will not say
	used     int // set by the run
}

// ExampleFlow_Pend admits each task at its estimate, holds one of two
// places in flight while it runs, and settles it to what it used.
func ExampleFlow_Pend() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer rdb.Close()
	lim, err := slidelimit.New(rdb, slidelimit.PerMinute(120).Named("units"),
		slidelimit.WithLimits(slidelimit.InFlight(2, time.Minute).Named("running")),
		slidelimit.WithPrefix("example-pend:"))
	if err != nil {
		panic(err)
	}
	_ = lim.Reset(ctx, "tenant:acme")

	f := &adapter.Flow[*task]{
		Name:    "tasklimit",
		Limiter: lim,
		Key:     func(t *task) (string, error) { return "tenant:" + t.tenant, nil },
		Cost:    func(t *task) int { return t.estimate },
		Settle:  func(t *task, _ adapter.Response) (int, bool) { return t.used, t.used > 0 },
	}
	for _, t := range []*task{{tenant: "acme", estimate: 40, work: 25}, {tenant: "acme", estimate: 40}, {tenant: "acme", estimate: 40, work: 10}} {
		d := f.Decide(ctx, t)
		if d.Verdict != adapter.Admit {
			fmt.Println("requeue")
			continue
		}
		p := f.Pend(ctx, t, d)
		fmt.Println("run at an estimate of", t.estimate, "; remaining", d.Result.Statuses[0].Remaining)
		t.used = t.work // … run the task, which finds what it used
		p.End(0, nil)   // settled to what it used, or left at its estimate; its place given back
	}
	res, _ := lim.Peek(ctx, "tenant:acme")
	fmt.Println("remaining", res.Statuses[0].Remaining, "; running", 2-res.Statuses[1].Remaining)
	// Output:
	// run at an estimate of 40 ; remaining 80
	// run at an estimate of 40 ; remaining 55
	// run at an estimate of 40 ; remaining 15
	// remaining 45 ; running 0
}

// apiCall is what a gateway limits: a call made with an API key of a team of
// an organisation.
type apiCall struct{ org, team, key string }

// ExampleFlow_tree holds each call to its API key's, its team's and its
// organisation's limits at once (slidelimit.Limiter.AllowTree): a call is
// admitted only if every level has room, and a denial, which names the
// limit that bound it, takes nothing from any level.
func ExampleFlow_tree() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer rdb.Close()
	// A prefix of this run's own, so that the example starts from a clean
	// slate at every level.
	prefix := "example-tree:" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	lim, err := slidelimit.New(rdb, slidelimit.PerMinute(100), slidelimit.WithPrefix(prefix))
	if err != nil {
		panic(err)
	}
	org := []slidelimit.Limit{slidelimit.PerMinute(4).Named("org")}
	team := []slidelimit.Limit{slidelimit.PerMinute(3).Named("team")}
	key := []slidelimit.Limit{slidelimit.PerMinute(2).Named("key")}

	f := &adapter.Flow[apiCall]{
		Name:    "gatewaylimit",
		Limiter: lim,
		Tree: func(c apiCall) (string, []slidelimit.Level, error) {
			if c.key == "" {
				return "", nil, errors.New("call has no API key")
			}
			return "org:" + c.org, []slidelimit.Level{
				{Limits: org},
				{Identity: "team:" + c.team, Limits: team},
				{Identity: "key:" + c.key, Limits: key},
			}, nil
		},
		Hook: func(_ context.Context, _ apiCall, err error) { fmt.Println("error:", err) },
	}
	for _, c := range []apiCall{
		{"acme", "ml", "k1"}, {"acme", "ml", "k1"}, {"acme", "ml", "k1"}, // the key's 2
		{"acme", "ml", "k2"}, {"acme", "ml", "k3"}, // the team's 3
		{"acme", "web", "k4"}, {"acme", "web", "k5"}, // the organisation's 4
		{"acme", "web", ""},
	} {
		switch d := f.Decide(ctx, c); d.Verdict {
		case adapter.Admit:
			fmt.Printf("%s/%s: run\n", c.team, c.key)
		case adapter.Deny:
			fmt.Printf("%s/%s: denied by %s\n", c.team, c.key, d.Result.Limit)
		case adapter.Fail:
			fmt.Println("drop")
		}
	}
	// Output:
	// ml/k1: run
	// ml/k1: run
	// ml/k1: denied by key
	// ml/k2: run
	// ml/k3: denied by team
	// web/k4: run
	// web/k5: denied by org
	// error: gatewaylimit: key: call has no API key
	// drop
}
