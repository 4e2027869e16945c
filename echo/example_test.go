package echolimit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/httplimit"
	echolimit "github.com/slidelimit/slidelimit/echo"
)

func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer rdb.Close()

	// Five requests in any 10 seconds per client IP, shared by every
	// instance of the service that uses this Redis.
	lim, err := slidelimit.New(rdb, slidelimit.Per(5, 10*time.Second), slidelimit.WithPrefix("example:echolimit:"))
	if err != nil {
		panic(err) // an invalid limit or option
	}
	// httptest's client is 192.0.2.1; start from a clean slate.
	_ = lim.Reset(context.Background(), slidelimit.IPIdentity("192.0.2.1", 0))

	e := echo.New()
	e.Use(echolimit.New(lim))
	e.GET("/ping", func(c echo.Context) error { return c.String(http.StatusOK, "pong") })

	for range 6 {
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ping", nil))
		fmt.Println(rec.Code, rec.Header().Get("X-RateLimit-Remaining"), rec.Header().Get("Content-Type"))
	}
	// Output:
	// 200 4 text/plain; charset=UTF-8
	// 200 3 text/plain; charset=UTF-8
	// 200 2 text/plain; charset=UTF-8
	// 200 1 text/plain; charset=UTF-8
	// 200 0 text/plain; charset=UTF-8
	// 429 0 application/problem+json
}

func ExampleNewWithConfig() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer rdb.Close()

	// A burst limit and an hourly quota, decided together.
	lim, err := slidelimit.New(rdb, slidelimit.PerSecond(10),
		slidelimit.WithLimits(slidelimit.PerHour(1000)),
		slidelimit.WithFailurePolicy(slidelimit.FailClosed))
	if err != nil {
		panic(err)
	}

	e := echo.New()
	// Behind a load balancer at 10.0.0.0/8: believe its X-Forwarded-For,
	// and no one else's.
	proxies, err := slidelimit.ParseTrustedProxies("10.0.0.0/8")
	if err != nil {
		panic(err)
	}
	byIP := echolimit.ClientIP{TrustedProxies: proxies}.Key
	e.Use(echolimit.NewWithConfig(lim, echolimit.Config{
		// Health checks are never limited.
		Skipper: func(c echo.Context) bool { return c.Path() == "/healthz" },
		// Clients with an API key by the key, the others by IP.
		IdentifierExtractor: echolimit.FirstKey(echolimit.KeyByHeader("X-API-Key"), byIP),
		// Requests that fail do not use up the quota.
		SkipFailedRequests: true,
	}))
	fmt.Println("configured")
	// Output: configured
}

func ExampleClientIP() {
	// A client that claims another address in X-Forwarded-For; no Redis
	// needed.
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.RemoteAddr = "192.0.2.1:41000"
	req.Header.Add("X-Forwarded-For", "203.0.113.7")

	e := echo.New()
	c := e.NewContext(req, httptest.NewRecorder())
	fmt.Println("RealIP:  ", c.RealIP())
	fmt.Println(echolimit.KeyByIP(c))

	// Once we say whom to trust, the proxy's hop counts: the right-most
	// untrusted one of every line.
	proxies, _ := slidelimit.ParseTrustedProxies("192.0.2.0/24")
	req.Header.Add("X-Forwarded-For", "198.51.100.9") // appended by the proxy
	fmt.Println(echolimit.ClientIP{TrustedProxies: proxies}.Key(c))
	// Output:
	// RealIP:   203.0.113.7
	// ip:192.0.2.1 <nil>
	// ip:198.51.100.9 <nil>
}

func ExampleJoinKeys() {
	// The key each request gets, shown by a handler; no Redis needed.
	key := echolimit.JoinKeys(echolimit.KeyByRoute, echolimit.KeyByIP)
	e := echo.New()
	e.GET("/items/:id", func(c echo.Context) error {
		id, err := key(c)
		if err != nil {
			return err
		}
		return c.String(http.StatusOK, id)
	})

	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/items/42", nil))
	fmt.Println(rec.Body.String())
	// Output: route:GET /items/:id|ip:192.0.2.1
}

func ExampleConfig_limiter() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer rdb.Close()

	// One limiter per plan, each validated once.
	free, err := slidelimit.New(rdb, slidelimit.PerMinute(60).Named("free"))
	if err != nil {
		panic(err)
	}
	pro, err := slidelimit.New(rdb, slidelimit.PerMinute(6000).Named("pro"))
	if err != nil {
		panic(err)
	}

	e := echo.New()
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			// An authentication middleware would find the user and plan here.
			c.Set("user_id", "u-1")
			c.Set("plan", "pro")
			return next(c)
		}
	})
	e.Use(echolimit.NewWithConfig(free, echolimit.Config{
		Limiter: func(c echo.Context) *slidelimit.Limiter {
			if c.Get("plan") == "pro" {
				return pro
			}
			return nil // the free limiter given to NewWithConfig
		},
		IdentifierExtractor: echolimit.KeyByContext("user_id"),
	}))
	e.GET("/ping", func(c echo.Context) error { return c.String(http.StatusOK, "pong") })

	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ping", nil))
	fmt.Println(rec.Code, rec.Header().Get("RateLimit-Policy"))
	// Output: 200 "pro";q=6000;w=60
}

// Limits per plan from one limiter: each request is held to the limits of
// its user's plan, counted on the user's one log.
func ExampleConfig_limits() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer rdb.Close()

	lim, err := slidelimit.New(rdb, slidelimit.PerMinute(60).Named("free"))
	if err != nil {
		panic(err)
	}
	plans := map[string][]slidelimit.Limit{
		"pro": {slidelimit.PerMinute(600).Named("pro"), slidelimit.PerSecond(20)},
	}

	e := echo.New()
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			// An authentication middleware would find the user and plan here.
			c.Set("user_id", "u-2")
			c.Set("plan", "pro")
			return next(c)
		}
	})
	e.Use(echolimit.NewWithConfig(lim, echolimit.Config{
		IdentifierExtractor: echolimit.KeyByContext("user_id"),
		Limits: func(c echo.Context) []slidelimit.Limit {
			plan, _ := c.Get("plan").(string)
			return plans[plan] // nil: the limiter's own, free
		},
	}))
	e.GET("/ping", func(c echo.Context) error { return c.String(http.StatusOK, "pong") })

	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ping", nil))
	fmt.Println(rec.Code, rec.Header().Get("RateLimit-Policy"))
	// Output: 200 "pro";q=600;w=60, "20/1s";q=20;w=1
}

// An LLM endpoint: each request is admitted at its estimate, 100 tokens,
// and settled to the tokens its response says it used.
func ExampleConfig_settle() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer rdb.Close()

	lim, err := slidelimit.New(rdb, slidelimit.PerMinute(1000).Named("tpm"),
		slidelimit.WithLimits(slidelimit.InFlight(4, time.Minute).Named("concurrent")),
		slidelimit.WithPrefix("example:echolimit:settle:"))
	if err != nil {
		panic(err)
	}
	_ = lim.Reset(context.Background(), slidelimit.IPIdentity("192.0.2.1", 0))

	e := echo.New()
	e.Use(echolimit.NewWithConfig(lim, echolimit.Config{
		Cost: func(echo.Context) int { return 100 }, // the request's max_tokens
		Settle: func(_ echo.Context, r httplimit.Response) (int, bool) {
			return httplimit.TotalTokens(r) // usage.total_tokens, of a JSON body or an SSE stream
		},
	}))
	e.POST("/v1/chat/completions", func(c echo.Context) error {
		return c.JSONBlob(http.StatusOK, []byte(`{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21}}`))
	})

	for range 2 {
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil))
		fmt.Println(rec.Code, rec.Header().Get("RateLimit"))
	}
	// Output:
	// 200 "tpm";r=900;t=60
	// 200 "tpm";r=879;t=60
}
