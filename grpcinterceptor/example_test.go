package grpclimit_test

import (
	"context"
	"fmt"
	"log"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	grpclimit "github.com/slidelimit/slidelimit/grpcinterceptor"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Limit every method to 100 calls a minute per client IP address, except
// the health service.
func ExampleUnaryServerInterceptor() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	lim, err := slidelimit.New(rdb, slidelimit.PerMinute(100))
	if err != nil {
		log.Fatal(err)
	}
	skip := grpclimit.WithSkipMethods("grpc.health.v1.Health")
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(lim, skip)),
		grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(lim, skip)),
	)
	_ = srv // register services, then srv.Serve(listener)
}

// Give an expensive method a tighter limit than the rest, and count each
// caller by API key, or by IP address when it sends none.
func ExampleWithMethodLimiters() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	general, err := slidelimit.New(rdb, slidelimit.PerMinute(600))
	if err != nil {
		log.Fatal(err)
	}
	reports, err := slidelimit.New(rdb, slidelimit.PerMinute(10), slidelimit.WithLimits(slidelimit.PerHour(100)))
	if err != nil {
		log.Fatal(err)
	}
	interceptor := grpclimit.UnaryServerInterceptor(general,
		grpclimit.WithMethodLimiters(map[string]*slidelimit.Limiter{
			"/acme.reports.v1.Reports/Generate": reports,
		}),
		grpclimit.WithKey(grpclimit.FirstKey(grpclimit.KeyByMetadata("x-api-key"), grpclimit.KeyByIP)),
	)
	_ = grpc.NewServer(grpc.ChainUnaryInterceptor(interceptor))
}

// Behind a load balancer, believe its x-forwarded-for, and nobody else's.
func ExampleWithTrustedProxies() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	lim, err := slidelimit.New(rdb, slidelimit.PerSecond(20))
	if err != nil {
		log.Fatal(err)
	}
	_ = grpclimit.UnaryServerInterceptor(lim,
		grpclimit.WithTrustedProxies(netip.MustParsePrefix("10.0.0.0/8")))

	// Or from a comma-separated list, such as an environment variable.
	proxies, err := slidelimit.ParseTrustedProxies(strings.Split("10.0.0.0/8, 192.0.2.7", ",")...)
	if err != nil {
		log.Fatal(err)
	}
	_ = grpclimit.UnaryServerInterceptor(lim, grpclimit.WithTrustedProxies(proxies...))
}

// Limit each stream when it opens, and each message it sends to the server
// to 50 a second per method and client.
func ExampleWithMessageLimit() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	streams, err := slidelimit.New(rdb, slidelimit.PerMinute(30))
	if err != nil {
		log.Fatal(err)
	}
	messages, err := slidelimit.New(rdb, slidelimit.PerSecond(50))
	if err != nil {
		log.Fatal(err)
	}
	_ = grpc.NewServer(grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(streams,
		grpclimit.WithMessageLimit(messages, grpclimit.JoinKeys(grpclimit.KeyByMethod, grpclimit.KeyByIP)))))
}

// A key function sees the call's metadata and a description of the call.
func ExampleFirstKey() {
	key := grpclimit.FirstKey(grpclimit.KeyByMetadata("x-api-key"), grpclimit.KeyByIP)
	call := grpclimit.Call{FullMethod: "/acme.v1.Shop/Buy", ClientIP: netip.MustParseAddr("2001:db8::7")}

	withKey := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-api-key", "k-123"))
	id, _ := key(withKey, call)
	fmt.Println(id)

	id, _ = key(context.Background(), call)
	fmt.Println(id)
	// Output:
	// header:x-api-key:sha256:NgWp5DWNpDAvis6kHw9Szg
	// ip:2001:db8::/64
}

// A client whose service config retries RESOURCE_EXHAUSTED waits for the
// server's grpc-retry-pushback-ms before it retries.
func ExampleUnaryServerInterceptor_serviceConfigRetry() {
	const serviceConfig = `{"methodConfig": [{
	  "name": [{"service": "acme.v1.Shop"}],
	  "retryPolicy": {
	    "maxAttempts": 3, "initialBackoff": "0.1s", "maxBackoff": "1s",
	    "backoffMultiplier": 2, "retryableStatusCodes": ["RESOURCE_EXHAUSTED"]
	  }
	}]}`
	conn, err := grpc.NewClient("127.0.0.1:50051",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(serviceConfig))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
}

// A client without a retry policy can retry on RetryInfo instead.
func ExampleUnaryClientInterceptor() {
	conn, err := grpc.NewClient("127.0.0.1:50051",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(grpclimit.UnaryClientInterceptor(
			grpclimit.WithRetries(3), grpclimit.WithMaxRetryDelay(5*time.Second))))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
}

// RetryDelay reads the delay of a denial; the QuotaFailure names the policy.
func ExampleRetryDelay() {
	st, _ := status.New(codes.ResourceExhausted, "grpclimit: rate limit 5/10s exceeded, retry in 2.5s").WithDetails(
		&errdetails.RetryInfo{RetryDelay: durationpb.New(2500 * time.Millisecond)},
		&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{Subject: "5/10s"}}},
	)
	err := st.Err()

	if d, ok := grpclimit.RetryDelay(err); ok {
		fmt.Println("retry in", d)
	}
	for _, d := range status.Convert(err).Details() {
		if qf, ok := d.(*errdetails.QuotaFailure); ok {
			fmt.Println("policy", qf.GetViolations()[0].GetSubject())
		}
	}
	// Output:
	// retry in 2.5s
	// policy 5/10s
}

// Use the limiter with go-grpc-middleware v2's ratelimit interceptors:
//
//	ratelimit.UnaryServerInterceptor(grpclimit.NewLimiter(lim))
func ExampleNewLimiter() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	lim, err := slidelimit.New(rdb, slidelimit.PerMinute(100))
	if err != nil {
		log.Fatal(err)
	}
	var l interface{ Limit(context.Context) error } = grpclimit.NewLimiter(lim)
	_ = l
}

// An LLM service: admit each call at its estimate, the max_tokens its
// caller sent in metadata, under a budget of tokens per minute and four
// calls in flight per API key, and settle it to the tokens its handler
// reports in the "x-total-tokens" trailer (grpc.SetTrailer, or a stream's
// SetTrailer).
func ExampleWithSettle() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	lim, err := slidelimit.New(rdb, slidelimit.PerMinute(100_000).Named("tpm"),
		slidelimit.WithLimits(slidelimit.InFlight(4, time.Minute).Named("concurrent")))
	if err != nil {
		log.Fatal(err)
	}
	opts := []grpclimit.Option{
		grpclimit.WithKey(grpclimit.KeyByMetadata("x-api-key")),
		grpclimit.WithCost(func(ctx context.Context, _ grpclimit.Call) int {
			if n, err := strconv.Atoi(strings.Join(metadata.ValueFromIncomingContext(ctx, "x-max-tokens"), "")); err == nil && n > 0 {
				return n
			}
			return 1_000
		}),
		grpclimit.WithSettle(func(_ context.Context, _ grpclimit.Call, r grpclimit.Response) (int, bool) {
			n, err := strconv.Atoi(strings.Join(r.Trailer.Get("x-total-tokens"), ""))
			return n, err == nil
		}),
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(lim, opts...)),
		grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(lim, opts...)),
	)
	_ = srv // register services, then srv.Serve(listener)
}
