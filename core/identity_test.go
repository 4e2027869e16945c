package slidelimit_test

import (
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
