package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
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

// get serves GET path on app. app.Test's client is 0.0.0.0.
func get(t *testing.T, app *fiber.App, path string, header ...string) *http.Response {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := app.Test(req, -1)
	if err != nil {
		t.Fatalf("GET %s error = %v", path, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp
}

func TestPing(t *testing.T) {
	app := newApp(newLimiter(t), slidelimit.ClientIP{})
	for i, want := range []int{200, 200, 200, 200, 200, 429} {
		// Without trusted proxies a forged X-Real-IP changes nothing.
		resp := get(t, app, "/ping", "X-Real-IP", "198.51.100.1")
		if resp.StatusCode != want {
			t.Errorf("GET /ping #%d = %d, want %d", i+1, resp.StatusCode, want)
		}
		if resp.Header.Get("RateLimit") == "" {
			t.Errorf("GET /ping #%d has no RateLimit header", i+1)
		}
	}
	if resp := get(t, app, "/healthz"); resp.StatusCode != http.StatusOK {
		t.Errorf("GET /healthz = %d, want 200", resp.StatusCode)
	}
}

func TestPingBehindProxy(t *testing.T) {
	// app.Test's peer, 0.0.0.0, plays the proxy. It sets X-Forwarded-For,
	// the default, or X-Real-IP, with CLIENT_IP_HEADER=X-Real-IP.
	proxy := slidelimit.TrustedProxies{netip.MustParsePrefix("0.0.0.0/32")}
	for _, header := range []string{"", slidelimit.HeaderXRealIP} {
		ip, err := slidelimit.ParseClientIP(proxy[0].String(), header)
		if err != nil {
			t.Fatal(err)
		}
		app := newApp(newLimiter(t), ip)
		for i, client := range []string{"198.51.100.1", "198.51.100.2", "198.51.100.3", "198.51.100.4", "198.51.100.5", "198.51.100.6"} {
			resp := get(t, app, "/ping", ip.Header, client)
			if resp.StatusCode != http.StatusOK || resp.Header.Get("X-RateLimit-Remaining") != "4" {
				t.Errorf("%s: GET /ping #%d for %s via proxy = %d remaining %q, want 200 remaining 4",
					ip.Header, i+1, client, resp.StatusCode, resp.Header.Get("X-RateLimit-Remaining"))
			}
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
