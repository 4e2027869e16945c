package echolimit_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"
	slidelimit "github.com/slidelimit/slidelimit/core"
	echolimit "github.com/slidelimit/slidelimit/echo"
)

func TestIdentifierExtractors(t *testing.T) {
	t.Parallel()
	apiKey := echolimit.KeyByHeader("x-api-key")
	empty := func(echo.Context) (string, error) { return "", nil }
	tests := []struct {
		name    string
		key     func(echo.Context) (string, error)
		stored  any // stored under "user" unless nil
		header  string
		want    string
		wantErr error
	}{
		{name: "ip", key: echolimit.KeyByIP, want: "ip:192.0.2.1"},
		{name: "header", key: apiKey, header: "k1", want: slidelimit.HeaderIdentity("X-API-Key", "k1")},
		{name: "header-missing", key: apiKey, wantErr: slidelimit.ErrInvalidKey},
		{name: "context-string", key: echolimit.KeyByContext("user"), stored: "u-1", want: "user:u-1"},
		{name: "context-int", key: echolimit.KeyByContext("user"), stored: 42, want: "user:42"},
		{name: "context-missing", key: echolimit.KeyByContext("user"), wantErr: slidelimit.ErrInvalidKey},
		{name: "context-bad-type", key: echolimit.KeyByContext("user"), stored: struct{}{}, wantErr: slidelimit.ErrInvalidKey},
		{name: "route", key: echolimit.KeyByRoute, want: "route:GET /items/:id"},
		{name: "join", key: echolimit.JoinKeys(apiKey, echolimit.KeyByIP), header: "k|1", want: slidelimit.HeaderIdentity("X-API-Key", "k|1") + "|ip:192.0.2.1"},
		{name: "join-error", key: echolimit.JoinKeys(apiKey, echolimit.KeyByIP), wantErr: slidelimit.ErrInvalidKey},
		{name: "join-none", key: echolimit.JoinKeys(), wantErr: slidelimit.ErrInvalidKey},
		{name: "first-header", key: echolimit.FirstKey(apiKey, echolimit.KeyByIP), header: "k1", want: slidelimit.HeaderIdentity("X-API-Key", "k1")},
		{name: "first-fallback", key: echolimit.FirstKey(apiKey, echolimit.KeyByIP), want: "ip:192.0.2.1"},
		{name: "first-all-empty", key: echolimit.FirstKey(empty), wantErr: slidelimit.ErrInvalidKey},
		{name: "first-none", key: echolimit.FirstKey(), wantErr: slidelimit.ErrInvalidKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got string
			var err error
			e := echo.New()
			e.GET("/items/:id", func(c echo.Context) error {
				if tt.stored != nil {
					c.Set("user", tt.stored)
				}
				got, err = tt.key(c)
				return nil
			})
			req := httptest.NewRequest(http.MethodGet, "/items/7", nil)
			if tt.header != "" {
				req.Header.Set("X-API-Key", tt.header)
			}
			e.ServeHTTP(httptest.NewRecorder(), req)
			if got != tt.want || !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Errorf("key = %q, %v; want %q, %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

// TestKeyByRouteInUse pins down what KeyByRoute documents: e.Use runs after
// routing and sees the route.
func TestKeyByRouteInUse(t *testing.T) {
	t.Parallel()
	e := echo.New()
	var got string
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			got, _ = echolimit.KeyByRoute(c)
			return next(c)
		}
	})
	e.GET("/items/:id", ok)
	e.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/items/7", nil))
	if want := "route:GET /items/:id"; got != want {
		t.Errorf("KeyByRoute in e.Use = %q, want %q", got, want)
	}
}
