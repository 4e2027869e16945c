package fiberlimit_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gofiber/fiber/v2"
	slidelimit "github.com/slidelimit/slidelimit/core"
	fiberlimit "github.com/slidelimit/slidelimit/fiber"
)

func TestKeyGenerators(t *testing.T) {
	t.Parallel()
	apiKey := fiberlimit.KeyByHeader("x-api-key")
	tests := []struct {
		name   string
		key    func(*fiber.Ctx) string
		locals any // stored under "user" unless nil
		header string
		want   string
	}{
		{name: "ip", key: fiberlimit.KeyByIP, want: "ip:0.0.0.0"},
		{name: "header", key: apiKey, header: "k1", want: slidelimit.HeaderIdentity("X-API-Key", "k1")},
		{name: "header-missing", key: apiKey, want: ""},
		{name: "locals-string", key: fiberlimit.KeyByLocals("user"), locals: "u-1", want: "user:u-1"},
		{name: "locals-int", key: fiberlimit.KeyByLocals("user"), locals: 42, want: "user:42"},
		{name: "locals-missing", key: fiberlimit.KeyByLocals("user"), want: ""},
		{name: "locals-bad-type", key: fiberlimit.KeyByLocals("user"), locals: struct{}{}, want: ""},
		{name: "route", key: fiberlimit.KeyByRoute, want: "route:GET /items/:id"},
		{name: "join", key: fiberlimit.JoinKeys(apiKey, fiberlimit.KeyByIP), header: "k|1", want: slidelimit.HeaderIdentity("X-API-Key", "k|1") + "|ip:0.0.0.0"},
		{name: "join-one-empty", key: fiberlimit.JoinKeys(apiKey, fiberlimit.KeyByIP), want: ""},
		{name: "join-none", key: fiberlimit.JoinKeys(), want: ""},
		{name: "first-header", key: fiberlimit.FirstKey(apiKey, fiberlimit.KeyByIP), header: "k1", want: slidelimit.HeaderIdentity("X-API-Key", "k1")},
		{name: "first-fallback", key: fiberlimit.FirstKey(apiKey, fiberlimit.KeyByIP), want: "ip:0.0.0.0"},
		{name: "first-none", key: fiberlimit.FirstKey(), want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			app := newApp()
			app.Get("/items/:id", func(c *fiber.Ctx) error {
				if tt.locals != nil {
					c.Locals("user", tt.locals)
				}
				return c.SendString(tt.key(c))
			})
			req := httptest.NewRequest(http.MethodGet, "/items/7", nil)
			if tt.header != "" {
				req.Header.Set("X-API-Key", tt.header)
			}
			if got := body(t, app, req); got != tt.want {
				t.Errorf("key = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestKeyByRouteInUse pins down what KeyByRoute documents: in app.Use, the
// route is the Use prefix, not the handler's route.
func TestKeyByRouteInUse(t *testing.T) {
	t.Parallel()
	app := newApp()
	var got string
	app.Use(func(c *fiber.Ctx) error {
		got = fiberlimit.KeyByRoute(c)
		return c.Next()
	})
	app.Get("/items/:id", ok)
	body(t, app, httptest.NewRequest(http.MethodGet, "/items/7", nil))
	if want := "route:GET /"; got != want {
		t.Errorf("KeyByRoute in app.Use = %q, want %q", got, want)
	}
}

// body returns the body app answers req with.
func body(t *testing.T, app *fiber.App, req *http.Request) string {
	t.Helper()
	resp, err := app.Test(req, -1)
	if err != nil {
		t.Fatalf("app.Test(%s) error = %v", req.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return string(b)
}
