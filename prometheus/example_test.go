package promlimit_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	promlimit "github.com/slidelimit/slidelimit/prometheus"
)

func Example() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()

	// One Metrics for every limiter of the service, registered once; here
	// with a registry of its own, usually with prometheus.MustRegister.
	m := promlimit.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)

	lim, err := slidelimit.New(rdb, slidelimit.Per(2, 10*time.Second),
		slidelimit.WithPrefix("promlimit-example:"),
		slidelimit.WithObserver(m.Observer("api")))
	if err != nil {
		panic(err)
	}
	_ = lim.Reset(ctx, "user:42") // start this example from a clean slate
	for range 3 {
		_, _ = lim.Allow(ctx, "user:42")
	}

	// What /metrics would show, the counters that are not zero.
	families, _ := reg.Gather()
	var b strings.Builder
	for _, f := range families {
		_, _ = expfmt.MetricFamilyToText(&b, f)
	}
	for _, line := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(line, "slidelimit_decisions_total") && !strings.HasSuffix(line, " 0") {
			fmt.Println(line)
		}
	}
	// Output:
	// slidelimit_decisions_total{limit="2/10s",limiter="api",outcome="allowed"} 2
	// slidelimit_decisions_total{limit="2/10s",limiter="api",outcome="denied"} 1
}
