package grpclimit_test

import (
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	grpclimit "github.com/slidelimit/slidelimit/grpcinterceptor"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// A client whose calls share a server's quota with every replica: each call
// waits its turn, retries honour RetryInfo, and a ResourceExhausted pauses
// every replica until the server's retry delay has passed.
func ExampleUnaryClientWaitInterceptor() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
	lim, err := slidelimit.New(rdb, slidelimit.Per(100, time.Second+50*time.Millisecond))
	if err != nil {
		panic(err)
	}
	conn, err := grpc.NewClient("partner.example:443",
		grpc.WithTransportCredentials(insecure.NewCredentials()), // TLS in production
		grpc.WithChainUnaryInterceptor(
			grpclimit.UnaryClientInterceptor(grpclimit.WithBlock(lim)),
			grpclimit.UnaryClientWaitInterceptor(lim),
		),
		grpc.WithStreamInterceptor(grpclimit.StreamClientWaitInterceptor(lim)),
	)
	if err != nil {
		panic(err)
	}
	defer conn.Close()
}
