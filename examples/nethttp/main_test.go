package main

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
)

func TestPing(t *testing.T) {
	lim, err := slidelimit.New(redistest.Client(t), slidelimit.Per(5, 10*time.Second), slidelimit.WithPrefix(redistest.Prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	h := newHandler(lim, slidelimit.ClientIP{})
	want := []int{200, 200, 200, 200, 200, 429}
	for i, w := range want {
		r := httptest.NewRequest(http.MethodGet, "/ping", nil)
		r.RemoteAddr = "203.0.113.9:40000"
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code != w {
			t.Errorf("GET /ping #%d = %d, want %d", i+1, rec.Code, w)
		}
		if rec.Header().Get("RateLimit") == "" {
			t.Errorf("GET /ping #%d has no RateLimit header", i+1)
		}
	}
	r := httptest.NewRequest(http.MethodGet, "/healthz", nil)
	r.RemoteAddr = "203.0.113.9:40000"
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	if rec.Code != http.StatusOK {
		t.Errorf("GET /healthz = %d, want 200", rec.Code)
	}
}

func TestPingBehindProxy(t *testing.T) {
	lim, err := slidelimit.New(redistest.Client(t), slidelimit.Per(5, 10*time.Second), slidelimit.WithPrefix(redistest.Prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	h := newHandler(lim, slidelimit.ClientIP{TrustedProxies: slidelimit.TrustedProxies{netip.MustParsePrefix("10.0.0.0/8")}})
	for i, client := range []string{"198.51.100.1", "198.51.100.2", "198.51.100.3", "198.51.100.4", "198.51.100.5", "198.51.100.6"} {
		r := httptest.NewRequest(http.MethodGet, "/ping", nil)
		r.RemoteAddr = "10.0.0.1:40000"
		r.Header.Set("X-Forwarded-For", client)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code != http.StatusOK || rec.Header().Get("X-RateLimit-Remaining") != "4" {
			t.Errorf("GET /ping #%d for %s via proxy = %d remaining %q, want 200 remaining 4", i+1, client, rec.Code, rec.Header().Get("X-RateLimit-Remaining"))
		}
	}
}

func TestNewRedis(t *testing.T) {
	t.Setenv("REDIS_CLUSTER_ADDRS", "")
	t.Setenv("REDIS_URL", "redis://:secret@127.0.0.2:6380/3")
	rdb, err := newRedis()
	if err != nil {
		t.Fatal(err)
	}
	c, ok := rdb.(*redis.Client)
	if !ok || c.Options().Addr != "127.0.0.2:6380" || c.Options().DB != 3 || c.Options().Password != "secret" {
		t.Errorf("newRedis() with REDIS_URL = %T %+v, want a client of 127.0.0.2:6380 db 3", rdb, c.Options())
	}
	_ = rdb.Close()

	t.Setenv("REDIS_URL", "http://nope")
	if _, err := newRedis(); err == nil {
		t.Error("newRedis() with a bad REDIS_URL = nil error, want one")
	}

	t.Setenv("REDIS_CLUSTER_ADDRS", "127.0.0.2:7000,127.0.0.2:7001")
	rdb, err = newRedis()
	if err != nil {
		t.Fatal(err)
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
