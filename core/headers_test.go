package slidelimit_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	slidelimit "github.com/slidelimit/slidelimit/core"
)

// fields collects what Headers.Write sets, one "Name: value" line each.
func fields(h slidelimit.Headers, r slidelimit.Result) string {
	var b strings.Builder
	h.Write(r, func(name, value string) { b.WriteString(name + ": " + value + "\n") })
	return b.String()
}

func TestHeadersWrite(t *testing.T) {
	burst, hourly := slidelimit.Per(10, time.Second), slidelimit.PerHour(1000).Named("hourly")
	allowed := slidelimit.Result{
		Allowed: true, Limit: burst, Remaining: 3, ResetAfter: 900 * time.Millisecond,
		Statuses: []slidelimit.Status{
			{Limit: burst, Remaining: 3, ResetAfter: 900 * time.Millisecond},
			{Limit: hourly, Remaining: 950, ResetAfter: 59*time.Minute + 100*time.Millisecond},
		},
	}
	denied := slidelimit.Result{
		Limit: hourly, RetryAfter: 1500 * time.Millisecond, ResetAfter: time.Hour,
		Statuses: []slidelimit.Status{
			{Limit: burst, Remaining: 9, ResetAfter: 200 * time.Millisecond},
			{Limit: hourly, RetryAfter: 1500 * time.Millisecond, ResetAfter: time.Hour},
		},
	}
	tests := []struct {
		name    string
		headers slidelimit.Headers
		result  slidelimit.Result
		want    string
	}{
		{"allowed, all fields", slidelimit.Headers{}, allowed, `RateLimit-Policy: "10/1s";q=10;w=1, "hourly";q=1000;w=3600
RateLimit: "10/1s";r=3;t=1, "hourly";r=950;t=3541
X-Ratelimit-Limit: 10
X-Ratelimit-Remaining: 3
X-Ratelimit-Reset: 1
`},
		{"denied: t and Retry-After agree", slidelimit.Headers{}, denied, `RateLimit-Policy: "10/1s";q=10;w=1, "hourly";q=1000;w=3600
RateLimit: "10/1s";r=9;t=1, "hourly";r=0;t=2
X-Ratelimit-Limit: 1000
X-Ratelimit-Remaining: 0
X-Ratelimit-Reset: 2
Retry-After: 2
`},
		{"only draft fields", slidelimit.Headers{Omit: slidelimit.HeaderXRateLimit | slidelimit.HeaderRetryAfter}, denied, `RateLimit-Policy: "10/1s";q=10;w=1, "hourly";q=1000;w=3600
RateLimit: "10/1s";r=9;t=1, "hourly";r=0;t=2
`},
		{"only X fields", slidelimit.Headers{Omit: slidelimit.HeaderRateLimit}, allowed, `X-Ratelimit-Limit: 10
X-Ratelimit-Remaining: 3
X-Ratelimit-Reset: 1
`},
		{"fail-open claims nothing", slidelimit.Headers{}, slidelimit.Result{Allowed: true, Limit: burst, Fallback: true}, ``},
		{"fail-closed sends Retry-After only", slidelimit.Headers{}, slidelimit.Result{Limit: burst, Fallback: true, RetryAfter: time.Second}, "Retry-After: 1\n"},
		{"shadow denial claims nothing", slidelimit.Headers{}, func() slidelimit.Result {
			r := denied
			r.Allowed, r.Shadow = true, true
			return r
		}(), ``},
		{"no decision, no fields", slidelimit.Headers{}, slidelimit.Result{Limit: burst}, ``},
		{"Retry-After is at least 1", slidelimit.Headers{Omit: slidelimit.HeaderRateLimit | slidelimit.HeaderXRateLimit},
			slidelimit.Result{Limit: burst, RetryAfter: time.Microsecond, Statuses: []slidelimit.Status{{Limit: burst, RetryAfter: time.Microsecond}}}, "Retry-After: 1\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := fields(tt.headers, tt.result); got != tt.want {
				t.Errorf("Headers.Write() wrote\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

func TestHeadersResetUnix(t *testing.T) {
	lim := slidelimit.PerMinute(5)
	r := slidelimit.Result{Allowed: true, Limit: lim, Remaining: 4, ResetAfter: 30 * time.Second,
		Statuses: []slidelimit.Status{{Limit: lim, Remaining: 4, ResetAfter: 30 * time.Second}}}
	before := time.Now().Unix()
	var reset string
	slidelimit.Headers{ResetUnix: true}.Write(r, func(name, value string) {
		if name == slidelimit.FieldXRateLimitReset {
			reset = value
		}
	})
	after := time.Now().Unix()
	got, err := strconv.ParseInt(reset, 10, 64)
	if err != nil || got < before+30 || got > after+30 {
		t.Fatalf("X-Ratelimit-Reset = %q, want a Unix time in [%d, %d]", reset, before+30, after+30)
	}
}
