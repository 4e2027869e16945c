package integration

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
)

// Example shows the setup these tests prove exact: every replica of a
// service builds its limiter with the same limits and key prefix on the
// same Redis, and together they admit exactly the quota. Here two limiters
// stand for two replicas.
func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()

	replica := func() *slidelimit.Limiter {
		lim, err := slidelimit.New(rdb, slidelimit.PerMinute(50), slidelimit.WithPrefix("api:"))
		if err != nil {
			log.Fatal(err)
		}
		return lim
	}
	replicas := []*slidelimit.Limiter{replica(), replica()}
	_ = replicas[0].Reset(context.Background(), "tenant-42") // a clean slate for the example

	admitted := 0
	for i := range 60 {
		res, err := replicas[i%2].Allow(context.Background(), "tenant-42")
		if err != nil {
			log.Print(err) // Redis failed; res holds the failure policy's decision
		}
		if res.Allowed {
			admitted++
		}
	}
	fmt.Println("admitted:", admitted)
	// Output: admitted: 50
}
