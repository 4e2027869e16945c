package slidelimit_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	slidelimit "github.com/slidelimit/slidelimit/core"
)

func TestLimitValidate(t *testing.T) {
	tests := []struct {
		name  string
		limit slidelimit.Limit
		ok    bool
	}{
		{"per second", slidelimit.PerSecond(10), true},
		{"per day", slidelimit.PerDay(5000), true},
		{"smallest", slidelimit.Per(1, time.Millisecond), true},
		{"largest", slidelimit.Per(slidelimit.MaxQuota, slidelimit.MaxWindow), true},
		{"named", slidelimit.PerMinute(100).Named("api.v1_burst-2"), true},
		{"zero value", slidelimit.Limit{}, false},
		{"zero quota", slidelimit.PerMinute(0), false},
		{"negative quota", slidelimit.PerMinute(-1), false},
		{"quota too large", slidelimit.PerMinute(slidelimit.MaxQuota + 1), false},
		{"window too short", slidelimit.Per(1, time.Millisecond-1), false},
		{"negative window", slidelimit.Per(1, -time.Second), false},
		{"window too long", slidelimit.Per(1, slidelimit.MaxWindow+1), false},
		{"name with slash", slidelimit.PerMinute(1).Named("a/b"), false},
		{"name with quote", slidelimit.PerMinute(1).Named(`a"b`), false},
		{"name with brace", slidelimit.PerMinute(1).Named("{a}"), false},
		{"name too long", slidelimit.PerMinute(1).Named(strings.Repeat("a", 65)), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.limit.Validate()
			if tt.ok && err != nil {
				t.Fatalf("%v.Validate() = %v, want nil", tt.limit, err)
			}
			if !tt.ok && !errors.Is(err, slidelimit.ErrInvalidLimit) {
				t.Fatalf("%v.Validate() = %v, want ErrInvalidLimit", tt.limit, err)
			}
		})
	}
}

func TestLimitString(t *testing.T) {
	tests := []struct {
		limit slidelimit.Limit
		want  string
	}{
		{slidelimit.PerSecond(10), "10/1s"},
		{slidelimit.PerMinute(100), "100/1m"},
		{slidelimit.PerHour(3), "3/1h"},
		{slidelimit.PerDay(5000), "5000/24h"},
		{slidelimit.Per(5, 90*time.Minute), "5/1h30m"},
		{slidelimit.Per(5, 10*time.Second), "5/10s"},
		{slidelimit.Per(7, 1500*time.Millisecond), "7/1.5s"},
		{slidelimit.Per(2, 250*time.Millisecond), "2/250ms"},
		{slidelimit.PerMinute(100).Named("burst"), "burst"},
	}
	for _, tt := range tests {
		if got := tt.limit.String(); got != tt.want {
			t.Errorf("%#v.String() = %q, want %q", tt.limit, got, tt.want)
		}
	}
}
