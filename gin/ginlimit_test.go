package ginlimit_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/adaptertest"
	"github.com/slidelimit/slidelimit/core/redistest"
	ginlimit "github.com/slidelimit/slidelimit/gin"
)

// The conformance suite (TestConformance) proves what every adapter must
// do; the tests here prove what is Gin's own.

func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode)
	os.Exit(m.Run())
}

// ok answers 200 "ok".
func ok(c *gin.Context) { c.String(http.StatusOK, "ok") }

// client is the peer of the requests sent here.
var client = netip.MustParseAddr("203.0.113.9")

func TestNewDenyHandler(t *testing.T) {
	t.Parallel()
	r := adaptertest.DenyHandler(t, func(lim *slidelimit.Limiter, denied func(slidelimit.Result, string)) adaptertest.Server {
		router := gin.New()
		router.GET("/a", ginlimit.New(lim, ginlimit.WithDenyHandler(func(c *gin.Context, res slidelimit.Result) {
			denied(res, c.Writer.Header().Get("Retry-After"))
			c.JSON(http.StatusServiceUnavailable, gin.H{"error": "slow down"})
		})), ok)
		return adaptertest.HTTPServer(router)
	})
	if body := string(r.Body); body != `{"error":"slow down"}` {
		t.Errorf("denied request's body = %q, want the deny handler's", body)
	}
}

func TestNewPerRoute(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	general := adaptertest.NewLimiter(t, rdb, slidelimit.Per(3, 10*time.Second))
	search := adaptertest.NewLimiter(t, rdb, slidelimit.Per(1, 10*time.Second).Named("search"))
	r := gin.New()
	r.Use(ginlimit.New(general,
		ginlimit.WithKey(ginlimit.JoinKeys(ginlimit.KeyByRoute, ginlimit.KeyByIP)),
		ginlimit.WithLimiterFunc(func(c *gin.Context) *slidelimit.Limiter {
			if c.FullPath() == "/search" {
				return search
			}
			return nil
		}),
	))
	r.GET("/search", ok)
	r.GET("/items/:id", ok)
	srv := adaptertest.HTTPServer(r)
	if got, want := adaptertest.Send(t, srv, 2, adaptertest.Request{Peer: client, Path: "/search"}), adaptertest.Statuses(1, 200, 429); !slices.Equal(got, want) {
		t.Errorf("GET /search = %v, want %v", got, want)
	}
	// All /items/:id share the route's quota.
	var got []int
	for i := range 4 {
		got = append(got, srv(t, adaptertest.Request{Peer: client, Path: "/items/" + strconv.Itoa(i)}).Status)
	}
	if want := adaptertest.Statuses(3, 200, 429); !slices.Equal(got, want) {
		t.Errorf("GET /items/:id = %v, want %v", got, want)
	}
}

// TestGinClientIPSpoof records why ClientIP is the documented key behind a
// proxy: Gin's c.ClientIP() reads only the first X-Forwarded-For line, so a
// client whose proxy appends a second line picks its own identity, while
// ClientIP.Key holds it to the limit.
func TestGinClientIPSpoof(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	send := func(key ginlimit.KeyFunc) int {
		r := gin.New()
		if err := r.SetTrustedProxies([]string{"127.0.0.1"}); err != nil {
			t.Fatal(err)
		}
		r.GET("/", ginlimit.New(adaptertest.NewLimiter(t, rdb, slidelimit.Per(5, time.Minute)), ginlimit.WithKey(key)), ok)
		n := 0
		for i := range 20 {
			req := adaptertest.Request{Peer: netip.MustParseAddr("127.0.0.1"), Path: "/", Header: http.Header{
				"X-Forwarded-For": {fmt.Sprintf("198.51.100.%d", i+1), "203.0.113.77"}, // the client's line, then the proxy's
			}}
			if adaptertest.HTTPServer(r)(t, req).Status == http.StatusOK {
				n++
			}
		}
		return n
	}
	proxies, err := slidelimit.ParseTrustedProxies("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	gin1, ours := send(ginlimit.KeyByGinClientIP), send(ginlimit.ClientIP{TrustedProxies: proxies}.Key)
	t.Logf("20 requests, forged first X-Forwarded-For line: KeyByGinClientIP admitted %d, ClientIP.Key admitted %d", gin1, ours)
	if ours != 5 {
		t.Errorf("ClientIP.Key admitted %d of 20, want 5", ours)
	}
	if gin1 != 20 {
		t.Errorf("KeyByGinClientIP admitted %d of 20, want 20 (Gin reads only the first line; if this changed, update the caveat)", gin1)
	}
}

// engineOK returns an engine serving GET / through mw, answering 200.
func engineOK(mw ...gin.HandlerFunc) *gin.Engine {
	r := gin.New()
	r.GET("/", append(mw, ok)...)
	return r
}

// TestMiddlewareAllocations pins what the middleware costs an admitted
// request beyond Gin's own: at most two allocations, Redis's round trip
// included (the decision's block and the identity).
func TestMiddlewareAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's sync.Pool drops items at random")
	}
	lim := adaptertest.NewLimiter(t, redistest.Client(t), slidelimit.PerMinute(slidelimit.MaxQuota))
	gin.SetMode(gin.ReleaseMode)
	adaptertest.Allocations(t, engineOK(), engineOK(ginlimit.New(lim)))
}

// BenchmarkMiddleware serves GET / bare and behind the middleware (every
// request admitted, against the test Redis): with -benchmem, the difference
// in allocs/op is what the limiter adds, go-redis included.
func BenchmarkMiddleware(b *testing.B) {
	lim := adaptertest.NewLimiter(b, redistest.Client(b), slidelimit.PerMinute(slidelimit.MaxQuota))
	for _, tc := range []struct {
		name string
		h    http.Handler
	}{{"bare", engineOK()}, {"limited", engineOK(ginlimit.New(lim))}} {
		b.Run(tc.name, func(b *testing.B) { adaptertest.Benchmark(b, tc.h) })
	}
}

func TestKeyFuncs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		key     ginlimit.KeyFunc
		path    string
		remote  string
		header  [][2]string
		user    any // stored under "user" before the key runs
		want    string
		wantErr error
	}{
		{"KeyByIP", ginlimit.KeyByIP, "/items/1", "203.0.113.9:1", nil, nil, "ip:203.0.113.9", nil},
		{"KeyByIP IPv6", ginlimit.KeyByIP, "/items/1", "[2001:db8:1:2:3::9]:1", nil, nil, "ip:2001:db8:1:2::/64", nil},
		{"ClientIP IPv6 /128", ginlimit.ClientIP{IPv6Prefix: 128}.Key, "/items/1", "[2001:db8::9]:1", nil, nil, "ip:2001:db8::9/128", nil},
		{"KeyByIP no address", ginlimit.KeyByIP, "/items/1", "@", nil, nil, "", slidelimit.ErrInvalidKey},
		{"KeyByGinClientIP trusted proxy", ginlimit.KeyByGinClientIP, "/items/1", "10.0.0.1:1", [][2]string{{"X-Forwarded-For", "198.51.100.1"}}, nil, "ip:198.51.100.1", nil},
		{"KeyByGinClientIP untrusted peer", ginlimit.KeyByGinClientIP, "/items/1", "203.0.113.9:1", [][2]string{{"X-Forwarded-For", "198.51.100.1"}}, nil, "ip:203.0.113.9", nil},
		{"KeyByHeader", ginlimit.KeyByHeader("x-api-key"), "/items/1", "203.0.113.9:1", [][2]string{{"X-Api-Key", "k1"}}, nil, slidelimit.HeaderIdentity("X-API-Key", "k1"), nil},
		{"KeyByHeader missing", ginlimit.KeyByHeader("X-API-Key"), "/items/1", "203.0.113.9:1", nil, nil, "", slidelimit.ErrInvalidKey},
		{"KeyByContext", ginlimit.KeyByContext("user"), "/items/1", "203.0.113.9:1", nil, "alice", "user:alice", nil},
		{"KeyByContext int", ginlimit.KeyByContext("user"), "/items/1", "203.0.113.9:1", nil, 42, "user:42", nil},
		{"KeyByContext missing", ginlimit.KeyByContext("user"), "/items/1", "203.0.113.9:1", nil, nil, "", slidelimit.ErrInvalidKey},
		{"KeyByRoute", ginlimit.KeyByRoute, "/items/1", "203.0.113.9:1", nil, nil, "route:GET /items/:id", nil},
		{"KeyByRoute unmatched", ginlimit.KeyByRoute, "/nowhere", "203.0.113.9:1", nil, nil, "route:", nil},
		{"JoinKeys", ginlimit.JoinKeys(ginlimit.KeyByRoute, ginlimit.KeyByIP), "/items/1", "203.0.113.9:1", nil, nil, "route:GET /items/:id|ip:203.0.113.9", nil},
		{"JoinKeys error", ginlimit.JoinKeys(ginlimit.KeyByRoute, ginlimit.KeyByHeader("X-API-Key")), "/items/1", "203.0.113.9:1", nil, nil, "", slidelimit.ErrInvalidKey},
		{"FirstKey first", ginlimit.FirstKey(ginlimit.KeyByContext("user"), ginlimit.KeyByIP), "/items/1", "203.0.113.9:1", nil, "bob", "user:bob", nil},
		{"FirstKey fallback", ginlimit.FirstKey(ginlimit.KeyByContext("user"), ginlimit.KeyByIP), "/items/1", "203.0.113.9:1", nil, nil, "ip:203.0.113.9", nil},
		{"FirstKey none", ginlimit.FirstKey(ginlimit.KeyByContext("user")), "/items/1", "203.0.113.9:1", nil, nil, "", slidelimit.ErrInvalidKey},
		{"FirstKey empty list", ginlimit.FirstKey(), "/items/1", "203.0.113.9:1", nil, nil, "", slidelimit.ErrInvalidKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got string
			var err error
			r := gin.New()
			if err := r.SetTrustedProxies([]string{"10.0.0.0/8"}); err != nil {
				t.Fatal(err)
			}
			run := func(c *gin.Context) {
				if tt.user != nil {
					c.Set("user", tt.user)
				}
				got, err = tt.key(c)
			}
			r.GET("/items/:id", run)
			r.NoRoute(run)
			req := httptest.NewRequest(http.MethodGet, tt.path, nil)
			req.RemoteAddr = tt.remote
			for _, h := range tt.header {
				req.Header.Add(h[0], h[1])
			}
			r.ServeHTTP(httptest.NewRecorder(), req)
			if got != tt.want || !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Errorf("key(%s from %s) = %q, %v, want %q, %v", tt.path, tt.remote, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

// TestOptionIsThisPackages keeps Option a type of this package rather than
// an alias of package adapter's generic one, so that go doc lists it here
// with its With… functions.
func TestOptionIsThisPackages(t *testing.T) {
	typ := reflect.TypeFor[ginlimit.Option]()
	if got, want := typ.PkgPath()+"."+typ.Name(), "github.com/slidelimit/slidelimit/gin.Option"; got != want {
		t.Errorf("ginlimit.Option is %s, want %s", got, want)
	}
}
