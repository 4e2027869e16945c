package ginlimit_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gin-gonic/gin"
	slidelimit "github.com/slidelimit/slidelimit/core"
	ginlimit "github.com/slidelimit/slidelimit/gin"
)

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
