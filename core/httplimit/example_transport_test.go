package httplimit_test

import (
	"context"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/httplimit"
)

// Every worker of every process shares a partner's 600 requests per minute:
// each request waits its turn, and a 429 with Retry-After pauses them all.
func ExampleNewTransport() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
	// The window's margin covers the spread of the delay between the
	// limiter's admission and the partner's count.
	lim, err := slidelimit.New(rdb, slidelimit.Per(600, time.Minute+100*time.Millisecond))
	if err != nil {
		panic(err)
	}
	client := &http.Client{Transport: httplimit.NewTransport(lim)}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://partner.example/v1/orders", nil)
	if err != nil {
		panic(err)
	}
	resp, err := client.Do(req) // waits for the limit, at most until ctx's deadline
	if err != nil {
		return
	}
	defer resp.Body.Close()
}
