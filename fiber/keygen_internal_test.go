package fiberlimit

import (
	"testing"

	"github.com/gofiber/fiber/v2"
)

// TestOwnKeyGenerator checks which key generators New trusts to return
// strings of their own, and so does not copy.
func TestOwnKeyGenerator(t *testing.T) {
	tests := []struct {
		name string
		f    func(*fiber.Ctx) string
		want bool
	}{
		{"KeyByIP", KeyByIP, true},
		{"ClientIP.Key", ClientIP{IPv6Prefix: 48}.Key, true},
		{"KeyByHeader", KeyByHeader("X-API-Key"), false},
		{"a view of the request", func(c *fiber.Ctx) string { return c.Get("X-API-Key") }, false},
	}
	for _, tt := range tests {
		if got := ownKeyGenerator(tt.f); got != tt.want {
			t.Errorf("ownKeyGenerator(%s) = %v, want %v", tt.name, got, tt.want)
		}
	}
}
