package slidelimit_test

import (
	"net/http"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
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

// header returns the fields Headers.Write sets with http.Header.Set.
func header(h slidelimit.Headers, r slidelimit.Result) http.Header {
	hdr := http.Header{}
	h.Write(r, hdr.Set)
	return hdr
}

// TestHeadersSetHeader checks that SetHeader sets exactly what Write with
// http.Header.Set does, for Results a limiter returned (whose fields live
// in the Result's own memory) and Results made by hand.
func TestHeadersSetHeader(t *testing.T) {
	burst, hourly := slidelimit.Per(10, time.Second), slidelimit.PerHour(1000).Named("hourly")
	lim, _ := newLimiter(t, redistest.Client(t), burst, slidelimit.WithLimits(hourly))
	var results []slidelimit.Result
	for range 11 {
		results = append(results, allow(t, lim, "client"))
	}
	results = append(results,
		slidelimit.Result{Allowed: true, Limit: burst, Fallback: true},
		slidelimit.Result{Limit: burst, Fallback: true, RetryAfter: time.Second},
		slidelimit.Result{Limit: burst, RetryAfter: time.Microsecond, Statuses: []slidelimit.Status{{Limit: burst, RetryAfter: time.Microsecond}}},
	)
	for _, h := range []slidelimit.Headers{{}, {Omit: slidelimit.HeaderRateLimit}, {Omit: slidelimit.HeaderXRateLimit | slidelimit.HeaderRetryAfter}} {
		for i, r := range results {
			got := http.Header{"Content-Type": {"text/plain"}, "Ratelimit": {"stale", "stale"}}
			h.SetHeader(r, got)
			want := http.Header{"Content-Type": {"text/plain"}, "Ratelimit": {"stale", "stale"}}
			h.Write(r, want.Set)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Headers%+v.SetHeader(result %d) = %v, want %v as Write sets them", h, i, got, want)
			}
		}
	}
	if got := results[len(results)-4].Allowed; got {
		t.Fatalf("the 11th request of 10 per second was admitted; the test wants a denial among its results")
	}
}

// TestHeadersSharedMemory checks that the fields a Result carries in its
// own memory stay right: a later Header.Add, a second write of the same
// Result and many more decisions leave every value as it was.
func TestHeadersSharedMemory(t *testing.T) {
	lim, _ := newLimiter(t, redistest.Client(t), slidelimit.PerMinute(100), slidelimit.WithLimits(slidelimit.PerHour(1000)))
	r := allow(t, lim, "client")
	want := header(slidelimit.Headers{}, r) // formatted apart, in memory of its own

	first := http.Header{}
	slidelimit.Headers{}.SetHeader(r, first)
	first.Add(slidelimit.FieldRateLimit, "added")     // must copy, not write into the next field's slot
	first.Add(slidelimit.FieldRateLimitPolicy, "too") // likewise
	second := http.Header{}
	slidelimit.Headers{}.SetHeader(r, second) // the Result's memory is taken: a copy of its own
	for range 200 {
		allow(t, lim, "other")
	}
	runtime.GC()

	if !reflect.DeepEqual(second, want) {
		t.Errorf("second SetHeader of one Result = %v, want %v", second, want)
	}
	for name, v := range want {
		got := first.Values(name)
		switch name {
		case "Ratelimit":
			v = append(v, "added")
		case "Ratelimit-Policy":
			v = append(v, "too")
		}
		if !reflect.DeepEqual(got, v) {
			t.Errorf("after Header.Add, %s = %q, want %q", name, got, v)
		}
	}
	if again := header(slidelimit.Headers{}, r); !reflect.DeepEqual(again, want) {
		t.Errorf("Write of the retained Result = %v, want %v", again, want)
	}
}

// TestHeadersConcurrentWrites writes one Result's fields from several
// goroutines at once, as copies of a Result may be; run with -race.
func TestHeadersConcurrentWrites(t *testing.T) {
	lim, _ := newLimiter(t, redistest.Client(t), slidelimit.PerMinute(100))
	r := allow(t, lim, "client")
	want := header(slidelimit.Headers{}, slidelimit.Result{
		Allowed: r.Allowed, Limit: r.Limit, Remaining: r.Remaining, ResetAfter: r.ResetAfter,
		Statuses: append([]slidelimit.Status(nil), r.Statuses...),
	})
	got := make([]http.Header, 8)
	var wg sync.WaitGroup
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = http.Header{}
			slidelimit.Headers{}.SetHeader(r, got[i])
		}()
	}
	wg.Wait()
	for i, h := range got {
		if !reflect.DeepEqual(h, want) {
			t.Errorf("SetHeader on goroutine %d = %v, want %v", i, h, want)
		}
	}
}
