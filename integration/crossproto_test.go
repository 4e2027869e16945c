package integration

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/gofiber/fiber/v2"
	"github.com/labstack/echo/v4"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/httplimit"
	"github.com/slidelimit/slidelimit/core/redistest"
	echolimit "github.com/slidelimit/slidelimit/echo"
	fiberlimit "github.com/slidelimit/slidelimit/fiber"
	ginlimit "github.com/slidelimit/slidelimit/gin"
	grpclimit "github.com/slidelimit/slidelimit/grpcinterceptor"
	"github.com/slidelimit/slidelimit/grpcinterceptor/grpctest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
)

// fleetKeys are the keys of one fleet: the same concept keyed by each
// adapter's own helper.
type fleetKeys struct {
	gin   ginlimit.KeyFunc
	echo  func(echo.Context) (string, error)
	fiber func(*fiber.Ctx) string
	http  httplimit.KeyFunc
	grpc  []grpclimit.Option
}

// fleetSend sends one request to a server of the fleet with the header
// fields (metadata for gRPC) in kv, and reports whether it was admitted.
type fleetSend func(ctx context.Context, kv ...string) (bool, error)

// startFleet starts a Gin, an Echo, a Fiber, a net/http and a gRPC server
// on loopback, each with its own limiter of limit under one key prefix, as
// replicas of one service in different frameworks and protocols would be.
// It returns the senders, and the keys the fleet's limiters wrote.
func startFleet(t *testing.T, limit slidelimit.Limit, keys fleetKeys) (map[string]fleetSend, func() []string) {
	t.Helper()
	rdb := backends()[0].client(t)
	prefix := redistest.Prefix(t)
	lim := func() *slidelimit.Limiter {
		return newLimiter(t, rdb, prefix, limit, slidelimit.WithTimeout(10*time.Second),
			slidelimit.WithFailurePolicy(slidelimit.FailClosed))
	}
	fleet := map[string]fleetSend{}

	r := gin.New()
	r.GET("/ping", ginlimit.New(lim(), ginlimit.WithKey(keys.gin)), func(c *gin.Context) { c.String(http.StatusOK, pong) })
	fleet["gin"] = httpSend(t, serveHTTP(t, r))

	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.GET("/ping", func(c echo.Context) error { return c.String(http.StatusOK, pong) },
		echolimit.NewWithConfig(lim(), echolimit.Config{IdentifierExtractor: keys.echo}))
	fleet["echo"] = httpSend(t, serveHTTP(t, e))

	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Get("/ping", fiberlimit.New(lim(), fiberlimit.Config{KeyGenerator: keys.fiber}), func(c *fiber.Ctx) error { return c.SendString(pong) })
	fleet["fiber"] = httpSend(t, serveFiber(t, app))

	mux := http.NewServeMux()
	mux.HandleFunc("GET /ping", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(pong)) })
	fleet["net/http"] = httpSend(t, serveHTTP(t, httplimit.New(lim(), httplimit.WithKey(keys.http))(mux)))

	gs := grpc.NewServer(grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(lim(), keys.grpc...)))
	healthpb.RegisterHealthServer(gs, health.NewServer())
	hc := healthpb.NewHealthClient(grpctest.Dial(t, grpctest.Serve(t, gs)))
	fleet["grpc"] = func(ctx context.Context, kv ...string) (bool, error) {
		for i := 0; i < len(kv); i += 2 {
			ctx = metadata.AppendToOutgoingContext(ctx, strings.ToLower(kv[i]), kv[i+1])
		}
		_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		return grpcAdmitted(err)
	}
	redisKeys := func() []string {
		ks, err := rdb.Keys(t.Context(), prefix+"*").Result()
		if err != nil {
			t.Fatalf("KEYS: %v", err)
		}
		return ks
	}
	return fleet, redisKeys
}

func serveHTTP(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

func httpSend(t *testing.T, base string) fleetSend {
	client := &http.Client{Timeout: 10 * time.Second}
	t.Cleanup(client.CloseIdleConnections)
	return func(ctx context.Context, kv ...string) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/ping", nil)
		if err != nil {
			return false, err
		}
		for i := 0; i < len(kv); i += 2 {
			req.Header.Add(kv[i], kv[i+1])
		}
		resp, err := client.Do(req)
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return admitted(resp.StatusCode)
	}
}

// fleetOrder lists the fleet's servers in a fixed order.
var fleetOrder = []string{"gin", "echo", "fiber", "net/http", "grpc"}

// TestOneAPIKeyAcrossRESTAndGRPC sends one API key to four HTTP servers
// (X-API-Key header) and a gRPC server (x-api-key metadata), concurrently,
// under a limit of 5: exactly 5 are admitted in total, since every adapter
// gives the key the same identity. The key never appears in Redis.
func TestOneAPIKeyAcrossRESTAndGRPC(t *testing.T) {
	t.Parallel()
	const apiKey = "k-0123456789abcdef"
	fleet, redisKeys := startFleet(t, slidelimit.Per(5, time.Minute), fleetKeys{
		gin:   ginlimit.KeyByHeader(apiKeyHeader),
		echo:  echolimit.KeyByHeader(apiKeyHeader),
		fiber: fiberlimit.KeyByHeader(apiKeyHeader),
		http:  httplimit.KeyByHeader(apiKeyHeader),
		grpc:  []grpclimit.Option{grpclimit.WithKey(grpclimit.KeyByMetadata("x-api-key"))},
	})
	const perServer = 4
	var mu sync.Mutex
	admitted := map[string]int{}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, name := range fleetOrder {
		for range perServer {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				ok, err := fleet[name](t.Context(), apiKeyHeader, apiKey)
				if err != nil {
					t.Errorf("%s: %v", name, err)
					return
				}
				if ok {
					mu.Lock()
					admitted[name]++
					mu.Unlock()
				}
			}()
		}
	}
	close(start)
	wg.Wait()
	total := 0
	for _, n := range admitted {
		total += n
	}
	t.Logf("one API key, %d requests over 4 HTTP adapters and gRPC, limit 5: admitted %d (%v)", perServer*len(fleetOrder), total, admitted)
	if total != 5 {
		t.Errorf("admitted %d in total, want exactly 5", total)
	}
	// Both protocols see the quota spent.
	for _, name := range fleetOrder {
		if ok, err := fleet[name](t.Context(), apiKeyHeader, apiKey); ok || err != nil {
			t.Errorf("%s after the quota was spent: admitted %v, %v; want denied", name, ok, err)
		}
	}

	// In turn, with another key: gRPC, then each HTTP adapter, twice
	// round. The first five (one per server) are admitted, the next five
	// denied, whichever protocol they use.
	for round := range 2 {
		for _, name := range []string{"grpc", "gin", "echo", "fiber", "net/http"} {
			ok, err := fleet[name](t.Context(), "x-api-key", "k-second")
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if want := round == 0; ok != want {
				t.Errorf("round %d, %s: admitted %v, want %v", round+1, name, ok, want)
			}
		}
	}

	ks := redisKeys()
	logs := 0 // an identity's log, beside its retention record (":#keep")
	for _, k := range ks {
		if !strings.HasSuffix(k, ":#keep") {
			logs++
		}
	}
	if logs != 2 {
		t.Errorf("Redis keys = %q, want one log per API key", ks)
	}
	for _, k := range ks {
		if strings.Contains(k, apiKey) || strings.Contains(k, "k-second") {
			t.Errorf("Redis key %q holds an API key in clear", k)
		}
	}
	t.Logf("Redis keys: %q", ks)
}

// TestMixedFleetBehindXFFProxy puts the five servers behind one proxy
// (the loopback peer) that sends only X-Forwarded-For, while each client
// also forges X-Real-IP and Forwarded. Three clients, each sending 12
// requests spread over all servers, get exactly 5 each in total.
func TestMixedFleetBehindXFFProxy(t *testing.T) {
	t.Parallel()
	proxies := slidelimit.TrustedProxies{netip.MustParsePrefix("127.0.0.0/8")}
	fleet, _ := startFleet(t, slidelimit.Per(5, time.Minute), fleetKeys{
		gin:   ginlimit.ClientIP{TrustedProxies: proxies}.Key,
		echo:  echolimit.ClientIP{TrustedProxies: proxies}.Key,
		fiber: fiberlimit.ClientIP{TrustedProxies: proxies}.Key,
		http:  httplimit.ClientIP{TrustedProxies: proxies}.Key,
		grpc:  []grpclimit.Option{grpclimit.WithTrustedProxies(proxies...)},
	})
	clients := []string{"198.51.100.1", "::ffff:198.51.100.2", "2001:db8:1:2::3"}
	admitted := map[string]int{}
	for i := range 12 * len(clients) {
		c := clients[i%len(clients)]
		name := fleetOrder[i%len(fleetOrder)]
		ok, err := fleet[name](t.Context(),
			"X-Real-Ip", fmt.Sprintf("192.0.2.%d", i+1),
			"Forwarded", fmt.Sprintf("for=192.0.2.%d", i+1),
			"X-Forwarded-For", fmt.Sprintf("192.0.2.%d", i+1), // the client's own line
			"X-Forwarded-For", c) // the proxy's
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if ok {
			admitted[c]++
		}
	}
	t.Logf("XFF-only proxy, 5 servers, 12 requests per client, limit 5: admitted %v", admitted)
	for _, c := range clients {
		if admitted[c] != 5 {
			t.Errorf("client %s: admitted %d in total, want exactly 5", c, admitted[c])
		}
	}
}
