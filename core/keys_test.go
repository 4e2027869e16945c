package slidelimit_test

import (
	"errors"
	"strings"
	"testing"

	slidelimit "github.com/slidelimit/slidelimit/core"
)

func TestKey(t *testing.T) {
	lim := slidelimit.PerMinute(100)
	tests := []struct {
		identity string
		want     string
	}{
		{"user:42", "p:{user:42}:#0"},
		{"203.0.113.9", "p:{203.0.113.9}:#0"},
		{"a b", "p:{a%20b}:#0"},
		{"{}", "p:{%7B%7D}:#0"},
		{"a}b", "p:{a%7Db}:#0"},
		{"50%", "p:{50%25}:#0"},
		{"#x", "p:{%23x}:#0"},
		{"line\nbreak", "p:{line%0Abreak}:#0"},
		{"\x00\xff", "p:{%00%FF}:#0"},
		{"é", "p:{%C3%A9}:#0"},
		{strings.Repeat("a", 128), "p:{" + strings.Repeat("a", 128) + "}:#0"},
		{strings.Repeat("a", 129), "p:{#wSywJKLlVRzKDgj86PHF4xRVXMP-9jKe6ZSj23UhZq4}:#0"},
	}
	for _, tt := range tests {
		got, err := slidelimit.Key("p:", tt.identity, lim)
		if err != nil || got != tt.want {
			t.Errorf("Key(%q) = %q, %v, want %q, nil", tt.identity, got, err, tt.want)
		}
	}
	// Every limit counts one log: the limit never changes the key.
	for _, other := range []slidelimit.Limit{slidelimit.PerDay(5), slidelimit.PerSecond(1).Named("burst")} {
		if a, b := mustKey(t, "x", lim), mustKey(t, "x", other); a != b {
			t.Errorf("Key(x, %v) = %q, Key(x, %v) = %q, want one key", lim, a, other, b)
		}
	}
	if _, err := slidelimit.Key("p:", "", lim); !errors.Is(err, slidelimit.ErrInvalidKey) {
		t.Errorf("Key(\"\") error = %v, want ErrInvalidKey", err)
	}
}

func mustKey(t *testing.T, identity string, limit slidelimit.Limit) string {
	t.Helper()
	key, err := slidelimit.Key("p:", identity, limit)
	if err != nil {
		t.Fatalf("Key(%q, %v) = %v", identity, limit, err)
	}
	return key
}

// TestKeyInjective checks that hostile identities never share a key and
// that every key has exactly one hash tag: the whole encoded identity.
func TestKeyInjective(t *testing.T) {
	identities := []string{
		"a", "a}", "a}b", "{a}", "a{", "%7D", "a%7Db", "%", "%25", "#", "%23",
		"a:b", "a|b", " ", "\t", "\n", "\x00", "\x00\x00", "\xff", "é", "%C3%A9",
		strings.Repeat("x", 128), strings.Repeat("x", 129), strings.Repeat("x", 1<<20),
		strings.Repeat("}", 43), strings.Repeat("{", 200), "#X1y6HRTLXFs7bvOSoTKAr7sqMdzrN3XAabd1nc9Pwzw",
	}
	seen := map[string]string{}
	for _, id := range identities {
		key, err := slidelimit.Key("p:", id, slidelimit.PerMinute(1))
		if err != nil {
			t.Fatalf("Key(%.20q) error = %v", id, err)
		}
		if prev, dup := seen[key]; dup {
			t.Errorf("Key(%.20q) = Key(%.20q) = %q", id, prev, key)
		}
		seen[key] = id
		if len(key) > 200 {
			t.Errorf("len(Key(%.20q)) = %d, want at most 200", id, len(key))
		}
		open, close := strings.IndexByte(key, '{'), strings.IndexByte(key, '}')
		if open != 2 || strings.Count(key, "{") != 1 || strings.Count(key, "}") != 1 || close < open+2 {
			t.Errorf("Key(%.20q) = %q, want one non-empty {hash tag} after the prefix", id, key)
		}
	}
}
