package httplimit_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/httplimit"
)

type ctxKey struct{}

type userID string

func (u userID) String() string { return "user-" + string(u) }

func TestKeyFuncs(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /items/{id}", func(http.ResponseWriter, *http.Request) {})

	request := func(path string, header ...string) *http.Request {
		r := httptest.NewRequest(http.MethodGet, path, nil)
		r.RemoteAddr = "203.0.113.9:1234"
		for i := 0; i+1 < len(header); i += 2 {
			r.Header.Set(header[i], header[i+1])
		}
		return r
	}
	withValue := func(r *http.Request, v any) *http.Request {
		return r.WithContext(context.WithValue(r.Context(), ctxKey{}, v))
	}
	patterned := request("/items/7")
	patterned.Pattern = "GET /items/{id}"

	tests := []struct {
		name    string
		key     httplimit.KeyFunc
		r       *http.Request
		want    string
		wantErr error
	}{
		{"KeyByIP", httplimit.KeyByIP, request("/"), "ip:203.0.113.9", nil},
		{"KeyByHeader readable", httplimit.KeyByHeader("x-api-key", slidelimit.Readable()), request("/", "X-Api-Key", "k1"), "header:x-api-key:clear:k1", nil},
		{"KeyByHeader", httplimit.KeyByHeader("x-api-key"), request("/", "X-Api-Key", "k1"), slidelimit.HeaderIdentity("X-API-Key", "k1"), nil},
		{"KeyByHeader missing", httplimit.KeyByHeader("X-API-Key"), request("/"), "", slidelimit.ErrInvalidKey},
		{"KeyByContext string", httplimit.KeyByContext(ctxKey{}), withValue(request("/"), "alice"), "user:alice", nil},
		{"KeyByContext Stringer", httplimit.KeyByContext(ctxKey{}), withValue(request("/"), userID("7")), "user:user-7", nil},
		{"KeyByContext int64", httplimit.KeyByContext(ctxKey{}), withValue(request("/"), int64(42)), "user:42", nil},
		{"KeyByContext missing", httplimit.KeyByContext(ctxKey{}), request("/"), "", slidelimit.ErrInvalidKey},
		{"KeyByContext empty", httplimit.KeyByContext(ctxKey{}), withValue(request("/"), ""), "", slidelimit.ErrInvalidKey},
		{"KeyByContext other type", httplimit.KeyByContext(ctxKey{}), withValue(request("/"), 1.5), "", slidelimit.ErrInvalidKey},
		{"KeyByPattern from request", httplimit.KeyByPattern(nil), patterned, "route:GET /items/{id}", nil},
		{"KeyByPattern from mux", httplimit.KeyByPattern(mux), request("/items/8"), "route:GET /items/{id}", nil},
		{"KeyByPattern unmatched", httplimit.KeyByPattern(mux), request("/nowhere"), "route:", nil},
		{"JoinKeys", httplimit.JoinKeys(httplimit.KeyByPattern(mux), httplimit.KeyByIP), request("/items/8"), "route:GET /items/{id}|ip:203.0.113.9", nil},
		{"JoinKeys error", httplimit.JoinKeys(httplimit.KeyByHeader("X-API-Key"), httplimit.KeyByIP), request("/"), "", slidelimit.ErrInvalidKey},
		{"FirstKey first", httplimit.FirstKey(httplimit.KeyByHeader("X-API-Key"), httplimit.KeyByIP), request("/", "X-API-Key", "k1"), slidelimit.HeaderIdentity("x-api-key", "k1"), nil},
		{"FirstKey fallback", httplimit.FirstKey(httplimit.KeyByHeader("X-API-Key"), httplimit.KeyByIP), request("/"), "ip:203.0.113.9", nil},
		{"FirstKey none", httplimit.FirstKey(httplimit.KeyByHeader("X-API-Key")), request("/"), "", slidelimit.ErrInvalidKey},
		{"FirstKey empty list", httplimit.FirstKey(), request("/"), "", slidelimit.ErrInvalidKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.key(tt.r)
			if got != tt.want || !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Errorf("key(%s) = %q, %v, want %q, %v", tt.r.URL.Path, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestIdentitiesDoNotCollide(t *testing.T) {
	t.Parallel()
	ip := slidelimit.IPIdentity("203.0.113.9", 0)
	user, _ := slidelimit.UserIdentity(ip)
	ids := []string{
		ip,
		slidelimit.HeaderIdentity("X-API-Key", ip),
		slidelimit.HeaderIdentity("X-API-Key", ip, slidelimit.Readable()),
		slidelimit.RouteIdentity(ip),
		user,
	}
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			t.Errorf("identity %q made twice from the value %q", id, ip)
		}
		seen[id] = true
	}
}
