package ginlimit_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/httplimit"
	ginlimit "github.com/slidelimit/slidelimit/gin"
)

// Limit one route to 5 requests per 10 seconds per client IP.
func ExampleNew() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	lim, err := slidelimit.New(rdb, slidelimit.Per(5, 10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	r := gin.New()
	r.GET("/ping", ginlimit.New(lim), func(c *gin.Context) {
		c.String(http.StatusOK, "pong")
	})
	_ = r.Run(":8080")
}

// Behind a load balancer: list the proxies to believe, and key by the client
// IP the shared resolver finds, the right-most untrusted X-Forwarded-For hop
// of every line.
func ExampleClientIP() {
	proxies, err := slidelimit.ParseTrustedProxies("10.0.0.0/8")
	if err != nil {
		log.Fatal(err)
	}
	key := ginlimit.ClientIP{TrustedProxies: proxies}.Key
	r := gin.New()
	r.GET("/", func(c *gin.Context) {
		fmt.Println(key(c))
	})

	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.Header.Add("X-Forwarded-For", "192.0.2.1")    // sent by the client
	req.Header.Add("X-Forwarded-For", "198.51.100.7") // appended by the proxy
	req.RemoteAddr = "10.1.2.3:40000"                 // the load balancer
	r.ServeHTTP(httptest.NewRecorder(), req)
	req.RemoteAddr = "203.0.113.9:40000" // a client that forged the header
	r.ServeHTTP(httptest.NewRecorder(), req)
	// Output:
	// ip:198.51.100.7 <nil>
	// ip:203.0.113.9 <nil>
}

// Follow Gin's own resolution, under the engine's trusted proxies.
func ExampleKeyByGinClientIP() {
	r := gin.New()
	if err := r.SetTrustedProxies([]string{"10.0.0.0/8"}); err != nil {
		log.Fatal(err)
	}
	r.GET("/", func(c *gin.Context) {
		fmt.Println(ginlimit.KeyByGinClientIP(c))
	})

	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.Header.Set("X-Forwarded-For", "198.51.100.7")
	req.RemoteAddr = "10.1.2.3:40000" // the load balancer
	r.ServeHTTP(httptest.NewRecorder(), req)
	// Output:
	// ip:198.51.100.7 <nil>
}

// Give each signed-in user a quota per route, and anonymous clients one per
// IP and route.
func ExampleJoinKeys() {
	key := ginlimit.JoinKeys(ginlimit.KeyByRoute, ginlimit.FirstKey(ginlimit.KeyByContext(gin.AuthUserKey), ginlimit.KeyByIP))

	r := gin.New()
	r.GET("/items/:id", func(c *gin.Context) {
		fmt.Println(key(c))
		c.Set(gin.AuthUserKey, "alice") // as gin.BasicAuth would
		fmt.Println(key(c))
	})
	req := httptest.NewRequest(http.MethodGet, "/items/42", nil)
	req.RemoteAddr = "203.0.113.9:40000"
	r.ServeHTTP(httptest.NewRecorder(), req)
	// Output:
	// route:GET /items/:id|ip:203.0.113.9 <nil>
	// route:GET /items/:id|user:alice <nil>
}

// Different limits per plan, from one limiter: each signed-in user is held
// to the limits of the plan an authentication middleware stored.
func ExampleWithLimits() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	lim, err := slidelimit.New(rdb, slidelimit.PerMinute(60).Named("free"))
	if err != nil {
		log.Fatal(err)
	}
	plans := map[string][]slidelimit.Limit{
		"pro": {slidelimit.PerMinute(600).Named("pro"), slidelimit.PerSecond(20)},
	}
	r := gin.New()
	r.Use(ginlimit.New(lim,
		ginlimit.WithKey(ginlimit.KeyByContext(gin.AuthUserKey)),
		ginlimit.WithLimits(func(c *gin.Context) []slidelimit.Limit {
			return plans[c.GetString("plan")] // nil: the limiter's own, free
		}),
	))
}

// Different limiters per route: a tight one for search, a general one for
// the rest of the API, each client counted per route.
func ExampleWithLimiterFunc() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	general, err := slidelimit.New(rdb, slidelimit.PerMinute(300), slidelimit.WithLimits(slidelimit.PerSecond(10)))
	if err != nil {
		log.Fatal(err)
	}
	search, err := slidelimit.New(rdb, slidelimit.PerMinute(30).Named("search"))
	if err != nil {
		log.Fatal(err)
	}
	r := gin.New()
	api := r.Group("/api", ginlimit.New(general,
		ginlimit.WithKey(ginlimit.JoinKeys(ginlimit.KeyByRoute, ginlimit.KeyByIP)),
		ginlimit.WithLimiterFunc(func(c *gin.Context) *slidelimit.Limiter {
			if c.FullPath() == "/api/search" {
				return search
			}
			return nil // general
		}),
		ginlimit.WithRefundFailed(),
	))
	api.GET("/search", func(c *gin.Context) { c.String(http.StatusOK, "results") })
}

// An LLM proxy: admit each request at its estimate, its max_tokens, and
// settle it to the tokens its response used, read from the JSON body or
// the stream of Server-Sent Events it sent.
func ExampleWithSettle() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	lim, err := slidelimit.New(rdb, slidelimit.PerMinute(100_000).Named("tpm"),
		slidelimit.WithLimits(slidelimit.InFlight(8, time.Minute).Named("concurrent")))
	if err != nil {
		log.Fatal(err)
	}
	var chat gin.HandlerFunc // the handler that calls the model
	r := gin.New()
	r.POST("/v1/chat/completions", ginlimit.New(lim,
		ginlimit.WithKey(ginlimit.KeyByHeader("Authorization")),
		ginlimit.WithCost(func(c *gin.Context) int {
			if n, err := strconv.Atoi(c.GetHeader("X-Max-Tokens")); err == nil && n > 0 {
				return n
			}
			return 1_000
		}),
		ginlimit.WithSettle(func(_ *gin.Context, r httplimit.Response) (int, bool) { return httplimit.TotalTokens(r) }),
	), chat)
	_ = r.Run(":8080")
}
