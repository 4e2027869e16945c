package otellimit_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	otellimit "github.com/slidelimit/slidelimit/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

func Example() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()

	// A service passes its MeterProvider, or none for the global one; here
	// one with a reader the example can print.
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(ctx) }()

	m, err := otellimit.New(otellimit.WithMeterProvider(mp))
	if err != nil {
		panic(err)
	}
	lim, err := slidelimit.New(rdb, slidelimit.Per(2, 10*time.Second),
		slidelimit.WithPrefix("otellimit-example:"),
		slidelimit.WithObserver(m.Observer("api")))
	if err != nil {
		panic(err)
	}
	_ = lim.Reset(ctx, "user:42") // start this example from a clean slate
	for range 3 {
		_, _ = lim.Allow(ctx, "user:42")
	}

	var rm metricdata.ResourceMetrics
	_ = reader.Collect(ctx, &rm)
	var lines []string
	for _, sm := range rm.ScopeMetrics {
		for _, metric := range sm.Metrics {
			if sum, ok := metric.Data.(metricdata.Sum[int64]); ok {
				for _, dp := range sum.DataPoints {
					outcome, _ := dp.Attributes.Value(otellimit.KeyOutcome)
					lines = append(lines, fmt.Sprintf("%s %s=%s: %d", metric.Name, otellimit.KeyOutcome, outcome.AsString(), dp.Value))
				}
			}
		}
	}
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// slidelimit.decisions slidelimit.outcome=allowed: 2
	// slidelimit.decisions slidelimit.outcome=denied: 1
}
