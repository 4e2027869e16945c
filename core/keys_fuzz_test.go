package slidelimit_test

import (
	"strconv"
	"strings"
	"testing"

	slidelimit "github.com/slidelimit/slidelimit/core"
)

// FuzzKey checks, for any identity, that its key has exactly one non-empty
// hash tag, stays bounded, and, unless hashed, decodes back to the
// identity: the encoding is invertible, so distinct identities never share
// a key.
func FuzzKey(f *testing.F) {
	for _, seed := range []string{"user:42", "{}", "a}b{c", "%7B", "#x", "\x00\xff\n", strings.Repeat("é", 70)} {
		f.Add(seed)
	}
	limit := slidelimit.PerMinute(10)
	f.Fuzz(func(t *testing.T, identity string) {
		key, err := slidelimit.Key("p:", identity, limit)
		if identity == "" {
			if err == nil {
				t.Fatalf("Key(%q) error = nil, want ErrInvalidKey", identity)
			}
			return
		}
		if err != nil {
			t.Fatalf("Key(%q) error = %v", identity, err)
		}
		tag, ok := strings.CutPrefix(key, "p:{")
		if !ok || !strings.HasSuffix(tag, "}:#0") {
			t.Fatalf("Key(%q) = %q, want p:{…}:#0", identity, key)
		}
		tag = strings.TrimSuffix(tag, "}:#0")
		if tag == "" || strings.ContainsAny(tag, "{}") || len(tag) > 128 {
			t.Fatalf("Key(%q) hash tag = %q, want 1..128 bytes without braces", identity, tag)
		}
		if strings.HasPrefix(tag, "#") {
			return // a digest: injective up to SHA-256 collisions
		}
		if got, ok := unescape(tag); !ok || got != identity {
			t.Fatalf("Key(%q) hash tag %q decodes to %q, %v", identity, tag, got, ok)
		}
	})
}

// unescape reverses the percent-encoding of Key.
func unescape(s string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", false
		}
		v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil {
			return "", false
		}
		b.WriteByte(byte(v))
		i += 2
	}
	return b.String(), true
}
