package httplimit_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/httplimit"
)

type userKey struct{}

// Limit one route of an http.ServeMux to 5 requests per 10 seconds per
// client IP.
func ExampleNew() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	lim, err := slidelimit.New(rdb, slidelimit.Per(5, 10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	ping := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "pong")
	})

	mux := http.NewServeMux()
	mux.Handle("GET /ping", httplimit.New(lim)(ping))
	// chi and gorilla/mux take the same middleware: r.Use(httplimit.New(lim)).
	_ = http.ListenAndServe(":8080", mux)
}

// Behind a load balancer, trust its forwarding headers, and only its.
func ExampleClientIP() {
	ips := httplimit.ClientIP{TrustedProxies: slidelimit.TrustedProxies{netip.MustParsePrefix("10.0.0.0/8")}}

	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("X-Forwarded-For", "192.0.2.1, 198.51.100.7")

	r.RemoteAddr = "10.1.2.3:40000" // the load balancer
	fmt.Println(ips.Key(r))
	r.RemoteAddr = "203.0.113.9:40000" // a client that forged the header
	fmt.Println(ips.Key(r))
	// Output:
	// ip:198.51.100.7 <nil>
	// ip:203.0.113.9 <nil>
}

// Limit clients by API key when they send one, and by IP otherwise.
func ExampleFirstKey() {
	key := httplimit.FirstKey(httplimit.KeyByHeader("X-API-Key"), httplimit.KeyByIP)

	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "203.0.113.9:40000"
	fmt.Println(key(r))
	r.Header.Set("X-API-Key", "k-123")
	fmt.Println(key(r))
	// Output:
	// ip:203.0.113.9 <nil>
	// header:x-api-key:sha256:NgWp5DWNpDAvis6kHw9Szg <nil>
}

// Give each client its own quota per route of a ServeMux.
func ExampleKeyByPattern() {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /items/{id}", func(http.ResponseWriter, *http.Request) {})
	key := httplimit.JoinKeys(httplimit.KeyByPattern(mux), httplimit.KeyByIP)

	r := httptest.NewRequest(http.MethodGet, "/items/42", nil)
	r.RemoteAddr = "203.0.113.9:40000"
	fmt.Println(key(r))
	// Output:
	// route:GET /items/{id}|ip:203.0.113.9 <nil>
}

// Limit signed-in users by the id an authentication middleware stored.
func ExampleKeyByContext() {
	key := httplimit.KeyByContext(userKey{})

	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r = r.WithContext(context.WithValue(r.Context(), userKey{}, "alice"))
	fmt.Println(key(r))
	// Output:
	// user:alice <nil>
}

// Different limits per plan, from one limiter: each request is held to the
// limits of its client's plan, counted on the client's one log.
func ExampleWithLimits() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	lim, err := slidelimit.New(rdb, slidelimit.PerMinute(60).Named("free"))
	if err != nil {
		log.Fatal(err)
	}
	pro := []slidelimit.Limit{slidelimit.PerMinute(600).Named("pro"), slidelimit.PerSecond(20)}
	mw := httplimit.New(lim,
		httplimit.WithKey(httplimit.KeyByHeader("X-API-Key")),
		httplimit.WithLimits(func(r *http.Request) []slidelimit.Limit {
			if r.Header.Get("X-Plan") == "pro" { // set by your auth layer
				return pro
			}
			return nil // the limiter's own, free
		}),
	)
	_ = mw
}

// A limiter per plan, chosen per request, for plans that differ in more
// than their limits; WithLimits serves plans that differ only in those.
func ExampleWithLimiterFunc() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	free, err := slidelimit.New(rdb, slidelimit.PerMinute(60).Named("free"))
	if err != nil {
		log.Fatal(err)
	}
	pro, err := slidelimit.New(rdb, slidelimit.PerMinute(600).Named("pro"), slidelimit.WithLimits(slidelimit.PerSecond(20)))
	if err != nil {
		log.Fatal(err)
	}
	mw := httplimit.New(free,
		httplimit.WithKey(httplimit.KeyByHeader("X-API-Key")),
		httplimit.WithLimiterFunc(func(r *http.Request) *slidelimit.Limiter {
			if r.Header.Get("X-Plan") == "pro" { // set by your auth layer
				return pro
			}
			return nil // the default, free
		}),
		httplimit.WithSkip(func(r *http.Request) bool { return r.URL.Path == "/healthz" }),
		httplimit.WithRefundFailed(),
	)
	_ = mw
}

// Refuse requests while Redis is down, and count the outage.
func ExampleWithErrorHook() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	lim, err := slidelimit.New(rdb, slidelimit.PerMinute(100),
		slidelimit.WithFailurePolicy(slidelimit.FailClosed), slidelimit.WithTimeout(50*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	mw := httplimit.New(lim, httplimit.WithErrorHook(func(r *http.Request, err error) {
		log.Printf("rate limit not checked for %s %s: %v", r.Method, r.URL.Path, err)
	}))
	_ = mw
}

// An LLM proxy: admit each request at its estimate, its max_tokens, under
// a budget of tokens per minute and eight requests in flight per API key,
// and settle it to the tokens its response used.
func ExampleWithSettle() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	lim, err := slidelimit.New(rdb, slidelimit.PerMinute(100_000).Named("tpm"),
		slidelimit.WithLimits(slidelimit.InFlight(8, time.Minute).Named("concurrent")))
	if err != nil {
		log.Fatal(err)
	}
	maxTokens := func(r *http.Request) int {
		n, err := strconv.Atoi(r.Header.Get("X-Max-Tokens")) // or read from the JSON body
		if err != nil || n < 1 {
			return 1_000
		}
		return n
	}
	var upstream http.Handler // a reverse proxy to the model's server
	handler := httplimit.New(lim,
		httplimit.WithKey(httplimit.KeyByHeader("Authorization")),
		httplimit.WithCost(maxTokens),
		httplimit.WithSettle(httplimit.TotalTokens),
	)(upstream)
	_ = http.ListenAndServe(":8080", handler)
}

// TotalTokens reads the usage of a streamed chat completion from its last
// data chunk.
func ExampleTotalTokens() {
	stream := "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}],\"usage\":null}\n\n" +
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":12,\"total_tokens\":21}}\n\n" +
		"data: [DONE]\n\n"
	fmt.Println(httplimit.TotalTokens(httplimit.Response{Status: http.StatusOK, Body: []byte(stream)}))
	// Output: 21 true
}

// Hold each request to its API key's, its team's and its organisation's
// limits at once, read from claims an auth layer put in the request.
func ExampleWithTree() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	lim, err := slidelimit.New(rdb, slidelimit.PerMinute(60))
	if err != nil {
		log.Fatal(err)
	}
	mw := httplimit.New(lim, httplimit.WithTree(func(r *http.Request) (string, []slidelimit.Level, error) {
		org, team, key := r.Header.Get("X-Org"), r.Header.Get("X-Team"), r.Header.Get("X-Key-Id") // set by your auth layer
		return "org:" + org, []slidelimit.Level{
			{Limits: []slidelimit.Limit{slidelimit.PerMinute(1000).Named("org")}},
			{Identity: "team:" + team, Limits: []slidelimit.Limit{slidelimit.PerMinute(300).Named("team")}},
			{Identity: "key:" + key, Limits: []slidelimit.Limit{
				slidelimit.PerMinute(100).Named("key"), slidelimit.InFlight(4, time.Minute).Named("key-in-flight")}},
		}, nil
	}))
	_ = mw
}
