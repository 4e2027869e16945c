package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// TestMain gives the example a Redis in REDIS_ADDR.
func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }

// Example sends six requests from one client to the server's handler: the
// limit of 5 per 10 seconds admits five and denies the sixth.
func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()
	lim, err := slidelimit.New(rdb, slidelimit.Per(5, 10*time.Second), slidelimit.WithPrefix("example:nethttp:"))
	if err != nil {
		panic(err)
	}
	_ = lim.Reset(context.Background(), slidelimit.IPIdentity("192.0.2.1", 0)) // a clean slate
	handler := newHandler(lim, slidelimit.ClientIP{})

	for range 6 {
		r := httptest.NewRequest(http.MethodGet, "/ping", nil)
		r.RemoteAddr = "192.0.2.1:40000"
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		fmt.Print(w.Code, " ")
	}
	fmt.Println()
	// Output: 200 200 200 200 200 429
}
