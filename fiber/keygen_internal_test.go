package fiberlimit

import (
	"errors"
	"testing"
	"unsafe"

	"github.com/gofiber/fiber/v2"
	slidelimit "github.com/slidelimit/slidelimit/core"
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

// TestOwnTreeCopies checks that a tree's tenant and identities are copied
// into levels of their own, and the tree function's slice left alone.
func TestOwnTreeCopies(t *testing.T) {
	buf := []byte("acme/team:ml")
	view := unsafe.String(&buf[0], len(buf)) // as c.Get returns: Fiber's bytes
	shared := []slidelimit.Level{{Identity: view[5:], Limits: []slidelimit.Limit{slidelimit.PerMinute(5)}}}
	tenant, levels, err := ownTree(view[:4], shared, nil)
	copy(buf, "XXXXXXXXXXXX") // Fiber reuses the bytes
	if err != nil || tenant != "acme" || len(levels) != 1 || levels[0].Identity != "team:ml" || len(levels[0].Limits) != 1 {
		t.Errorf("ownTree = %q, %+v, %v, want acme with team:ml of their own", tenant, levels, err)
	}
	if &levels[0] == &shared[0] {
		t.Errorf("ownTree returned the tree function's slice, want a copy")
	}
	if _, _, err := ownTree("acme", nil, errors.New("no token")); err == nil {
		t.Errorf("ownTree with an error = nil error, want it")
	}
}
