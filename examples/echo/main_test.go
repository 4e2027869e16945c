package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
)

func newLimiter(t *testing.T) *slidelimit.Limiter {
	t.Helper()
	lim, err := slidelimit.New(redistest.Client(t), slidelimit.Per(5, 10*time.Second), slidelimit.WithPrefix(redistest.Prefix(t)))
	if err != nil {
		t.Fatalf("slidelimit.New() error = %v", err)
	}
	return lim
}

// get serves GET path on e from the peer remote.
func get(e *echo.Echo, remote, path string, header ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.RemoteAddr = remote
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	return rec
}

func TestPing(t *testing.T) {
	e := newServer(newLimiter(t), slidelimit.ClientIP{})
	for i, want := range []int{200, 200, 200, 200, 200, 429} {
		// Without trusted proxies a forged X-Forwarded-For changes nothing.
		rec := get(e, "203.0.113.9:40000", "/ping", "X-Forwarded-For", "198.51.100.1")
		if rec.Code != want {
			t.Errorf("GET /ping #%d = %d, want %d", i+1, rec.Code, want)
		}
		if rec.Header().Get("RateLimit") == "" {
			t.Errorf("GET /ping #%d has no RateLimit header", i+1)
		}
	}
	if rec := get(e, "203.0.113.9:40000", "/healthz"); rec.Code != http.StatusOK {
		t.Errorf("GET /healthz = %d, want 200", rec.Code)
	}
}

func TestPingBehindProxy(t *testing.T) {
	proxies, err := slidelimit.ParseTrustedProxies("10.0.0.0/8")
	if err != nil {
		t.Fatalf("ParseTrustedProxies() error = %v", err)
	}
	e := newServer(newLimiter(t), slidelimit.ClientIP{TrustedProxies: proxies})
	for i, client := range []string{"198.51.100.1", "198.51.100.2", "198.51.100.3", "198.51.100.4", "198.51.100.5", "198.51.100.6"} {
		rec := get(e, "10.0.0.1:40000", "/ping", "X-Forwarded-For", client)
		if rec.Code != http.StatusOK || rec.Header().Get("X-RateLimit-Remaining") != "4" {
			t.Errorf("GET /ping #%d for %s via proxy = %d remaining %q, want 200 remaining 4",
				i+1, client, rec.Code, rec.Header().Get("X-RateLimit-Remaining"))
		}
	}
	// A private address that is not a listed proxy is a client.
	for i := range 6 {
		rec := get(e, "192.168.1.1:40000", "/ping", "X-Forwarded-For", "198.51.100.9")
		if want := []int{200, 200, 200, 200, 200, 429}[i]; rec.Code != want {
			t.Errorf("GET /ping #%d from 192.168.1.1 = %d, want %d", i+1, rec.Code, want)
		}
	}
}

func TestIPNet(t *testing.T) {
	for _, tt := range []struct {
		prefix string
		want   string
		in     string
		out    string
	}{
		{"10.0.0.0/8", "10.0.0.0/8", "10.255.0.1", "11.0.0.1"},
		{"192.0.2.7/32", "192.0.2.7/32", "192.0.2.7", "192.0.2.8"},
		{"2001:db8::/32", "2001:db8::/32", "2001:db8:1::1", "2001:db9::1"},
	} {
		n := ipNet(netip.MustParsePrefix(tt.prefix))
		if got := n.String(); got != tt.want {
			t.Errorf("ipNet(%s) = %s, want %s", tt.prefix, got, tt.want)
		}
		if !n.Contains(net.ParseIP(tt.in)) || n.Contains(net.ParseIP(tt.out)) {
			t.Errorf("ipNet(%s) contains %s: %v, %s: %v; want true, false", tt.prefix,
				tt.in, n.Contains(net.ParseIP(tt.in)), tt.out, n.Contains(net.ParseIP(tt.out)))
		}
	}
}

func TestNewRedis(t *testing.T) {
	t.Setenv("REDIS_CLUSTER_ADDRS", "")
	t.Setenv("REDIS_URL", "redis://:secret@127.0.0.2:6380/3")
	rdb, err := newRedis()
	if err != nil {
		t.Fatalf("newRedis() error = %v", err)
	}
	c, ok := rdb.(*redis.Client)
	if !ok || c.Options().Addr != "127.0.0.2:6380" || c.Options().DB != 3 || c.Options().Password != "secret" {
		t.Errorf("newRedis() with REDIS_URL = %T, want a client of 127.0.0.2:6380 db 3", rdb)
	}
	_ = rdb.Close()

	t.Setenv("REDIS_URL", "http://nope")
	if _, err := newRedis(); err == nil {
		t.Error("newRedis() with a bad REDIS_URL = nil error, want one")
	}

	t.Setenv("REDIS_CLUSTER_ADDRS", "127.0.0.2:7000, 127.0.0.2:7001")
	rdb, err = newRedis()
	if err != nil {
		t.Fatalf("newRedis() error = %v", err)
	}
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok || len(cc.Options().Addrs) != 2 {
		t.Errorf("newRedis() with REDIS_CLUSTER_ADDRS = %T, want a cluster client of 2 seeds", rdb)
	}
	_ = rdb.Close()
}

func TestRunStopsOnSignal(t *testing.T) {
	rdb := redistest.Client(t)
	t.Setenv("REDIS_CLUSTER_ADDRS", "")
	t.Setenv("REDIS_URL", "redis://"+rdb.Options().Addr+"/0")
	t.Setenv("ADDR", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // as SIGTERM would
	if err := run(ctx); err != nil {
		t.Errorf("run after the signal = %v, want nil", err)
	}
}

func TestRunRejectsBadTrustedProxies(t *testing.T) {
	rdb := redistest.Client(t)
	t.Setenv("REDIS_CLUSTER_ADDRS", "")
	t.Setenv("REDIS_URL", "redis://"+rdb.Options().Addr+"/0")
	t.Setenv("ADDR", "127.0.0.1:0")
	t.Setenv("TRUSTED_PROXIES", "10.0.0.0/8, lb.internal")
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // a run that got past the list would stop at once, with nil
	if err := run(ctx); !errors.Is(err, slidelimit.ErrInvalidOption) {
		t.Errorf("run with TRUSTED_PROXIES=%q = %v, want an error wrapping slidelimit.ErrInvalidOption", os.Getenv("TRUSTED_PROXIES"), err)
	}
}
