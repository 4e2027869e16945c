package slidelimit_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	slidelimit "github.com/slidelimit/slidelimit/core"
)

func TestIPIdentity(t *testing.T) {
	tests := []struct {
		ip     string
		prefix int
		want   string
	}{
		{"203.0.113.9", 0, "ip:203.0.113.9"},
		{"::ffff:203.0.113.9", 0, "ip:203.0.113.9"},
		{"2001:db8:1:2:3:4:5:6", 0, "ip:2001:db8:1:2::/64"},
		{"2001:db8:1:2:ffff::1", 0, "ip:2001:db8:1:2::/64"},
		{"2001:db8:1:2:3:4:5:6", 48, "ip:2001:db8:1::/48"},
		{"2001:db8:1:2:3:4:5:6", 128, "ip:2001:db8:1:2:3:4:5:6/128"},
		{"fe80::1%eth0", 0, "ip:fe80::/64"},
		{"not an ip", 0, "ip:not an ip"},
		{"", 0, "ip:"},
	}
	for _, tt := range tests {
		if got := slidelimit.IPIdentity(tt.ip, tt.prefix); got != tt.want {
			t.Errorf("IPIdentity(%q, %d) = %q, want %q", tt.ip, tt.prefix, got, tt.want)
		}
	}
}

func TestJoinIdentities(t *testing.T) {
	lists := [][]string{
		{"a", "b"}, {"a|b"}, {"a|", "b"}, {"a", "|b"}, {"a\\", "b"}, {"a\\|b"},
		{"a", "", "b"}, {"a", "b", ""}, {"", "a", "b"}, {"ab"}, {"a\\\\", "|b"},
	}
	seen := map[string][]string{}
	for _, parts := range lists {
		got := slidelimit.JoinIdentities(parts...)
		if prev, dup := seen[got]; dup {
			t.Errorf("JoinIdentities(%q) = JoinIdentities(%q) = %q", parts, prev, got)
		}
		seen[got] = parts
	}
	if got, want := slidelimit.JoinIdentities("GET /x", "ip:1.2.3.4"), "GET /x|ip:1.2.3.4"; got != want {
		t.Errorf("JoinIdentities = %q, want %q", got, want)
	}
}

func TestHeaderIdentity(t *testing.T) {
	const key = "s3cr3t-api-key"
	plain := slidelimit.HeaderIdentity("X-API-Key", key)
	tests := []struct {
		name string
		got  string
		want string
	}{
		{"HTTP and gRPC names agree", slidelimit.HeaderIdentity("x-api-key", key), plain},
		{"plain SHA-256", plain, "header:x-api-key:sha256:" + b64(sha256Sum(key)[:16])},
		{"readable", slidelimit.HeaderIdentity("X-Api-Key", key, slidelimit.Readable()), "header:x-api-key:clear:" + key},
		{"readable wins over a hash key", slidelimit.HeaderIdentity("X-Api-Key", key, slidelimit.HashKey([]byte("k")), slidelimit.Readable()), "header:x-api-key:clear:" + key},
		{"keyed", slidelimit.HeaderIdentity("X-Api-Key", key, slidelimit.HashKey([]byte("server secret"))), "header:x-api-key:hmac:" + b64(hmacSum("server secret", key)[:16])},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: HeaderIdentity = %q, want %q", tt.name, tt.got, tt.want)
		}
	}
	if strings.Contains(plain, key) {
		t.Errorf("HeaderIdentity(%q) = %q holds the secret", key, plain)
	}
	if other := slidelimit.HeaderIdentity("X-API-Key", key, slidelimit.HashKey([]byte("other secret"))); other == slidelimit.HeaderIdentity("X-API-Key", key, slidelimit.HashKey([]byte("server secret"))) {
		t.Errorf("HeaderIdentity under two hash keys = %q both", other)
	}
}

func TestUserAndRouteIdentity(t *testing.T) {
	tests := []struct {
		in   any
		want string // "" for an error
	}{
		{"alice", "user:alice"}, {42, "user:42"}, {int64(-7), "user:-7"}, {uint32(7), "user:7"},
		{netip.MustParseAddr("192.0.2.1"), "user:192.0.2.1"},
		{nil, ""}, {"", ""}, {3.5, ""}, {[]byte("x"), ""},
	}
	for _, tt := range tests {
		got, err := slidelimit.UserIdentity(tt.in)
		if tt.want == "" {
			if !errors.Is(err, slidelimit.ErrInvalidKey) {
				t.Errorf("UserIdentity(%#v) = %q, %v, want ErrInvalidKey", tt.in, got, err)
			}
			continue
		}
		if got != tt.want || err != nil {
			t.Errorf("UserIdentity(%#v) = %q, %v, want %q", tt.in, got, err, tt.want)
		}
	}
	if got := slidelimit.RouteIdentity("GET /items/{id}"); got != "route:GET /items/{id}" {
		t.Errorf("RouteIdentity = %q", got)
	}
}

// FuzzIdentity checks the identity encodings for any bytes: a readable
// header identity gives its value back, hashed ones never hold a value of
// 16 bytes or more past the header's name and keep to a fixed length, the three encodings of one
// value differ, and JoinIdentities splits back into its parts.
func FuzzIdentity(f *testing.F) {
	f.Add("X-API-Key", "s3cr3t", "a|b")
	f.Add("", "", "")
	f.Add("x-api-key", "clear:x", `a\|b\`)
	f.Add("Authorization", "Bearer eyJhbGciOi...", "\x00\xff|\\")
	f.Add("0000000000000000", "0000000000000000", "") // the name may equal the value
	f.Fuzz(func(t *testing.T, name, value, part string) {
		clear := slidelimit.HeaderIdentity(name, value, slidelimit.Readable())
		prefix := "header:" + strings.ToLower(name) + ":"
		if got, ok := strings.CutPrefix(clear, prefix+"clear:"); !ok || got != value {
			t.Fatalf("HeaderIdentity(%q, %q, Readable()) = %q, want %q+value", name, value, clear, prefix+"clear:")
		}
		plain := slidelimit.HeaderIdentity(name, value)
		keyed := slidelimit.HeaderIdentity(name, value, slidelimit.HashKey([]byte(part)))
		for _, id := range []string{plain, keyed} {
			if len(id) != len(prefix)+len("sha256:")+22 && len(id) != len(prefix)+len("hmac:")+22 {
				t.Fatalf("HeaderIdentity(%q, %q) = %q, want a 128-bit digest", name, value, id)
			}
			if len(value) >= 16 && strings.Contains(strings.TrimPrefix(id, prefix), value) {
				t.Fatalf("HeaderIdentity(%q, %q) = %q holds the value", name, value, id)
			}
		}
		if plain == clear || plain == keyed || keyed == clear {
			t.Fatalf("HeaderIdentity(%q, %q): encodings coincide: %q, %q, %q", name, value, clear, plain, keyed)
		}
		parts := []string{name, value, part}
		if got := splitIdentities(slidelimit.JoinIdentities(parts...)); !slices.Equal(got, parts) {
			t.Fatalf("JoinIdentities(%q) splits back into %q", parts, got)
		}
	})
}

// splitIdentities reverses JoinIdentities.
func splitIdentities(s string) []string {
	var parts []string
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\' && i+1 < len(s):
			i++
			b.WriteByte(s[i])
		case c == '|':
			parts = append(parts, b.String())
			b.Reset()
		default:
			b.WriteByte(c)
		}
	}
	return append(parts, b.String())
}

func sha256Sum(s string) []byte { sum := sha256.Sum256([]byte(s)); return sum[:] }

func hmacSum(key, s string) []byte {
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte(s))
	return m.Sum(nil)
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }
