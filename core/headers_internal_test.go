package slidelimit

import (
	"net/http"
	"net/netip"
	"strconv"
	"testing"
	"time"
)

// TestAppendQuotedLimit checks the header's limit names against
// strconv.Quote(Limit.String()), which they replace.
func TestAppendQuotedLimit(t *testing.T) {
	limits := []Limit{
		PerSecond(10), PerMinute(MaxQuota), PerHour(1), PerDay(5), Per(1, MaxWindow), Per(3, MinWindow),
		Per(7, 1500*time.Microsecond), Per(7, 999*time.Millisecond), Per(2, 90*time.Second),
		Per(2, time.Hour+30*time.Minute), Per(2, time.Hour+time.Second), Per(2, 1500*time.Millisecond),
		Per(2, 25*time.Hour+time.Microsecond), PerHour(1000).Named("hourly"), PerHour(1).Named("a.b-c_d"),
		{Quota: 1, Window: time.Minute, Name: "with \"quotes\" and \\"}, {Quota: 1, Window: time.Minute, Name: "naïve\n"},
		{Quota: -1, Window: -time.Second}, {}, {Quota: 1, Window: 500 * time.Nanosecond},
	}
	for w := time.Millisecond; w <= MaxWindow; w = w*7/3 + time.Microsecond {
		limits = append(limits, Per(1, w))
	}
	for _, lim := range limits {
		if got, want := string(appendQuotedLimit([]byte("x"), lim)), "x"+strconv.Quote(lim.String()); got != want {
			t.Errorf("appendQuotedLimit(%#v) = %s, want %s", lim, got, want)
		}
	}
}

// TestHeaderFieldNames checks the names SetHeader stores against the ones
// http.Header.Set would.
func TestHeaderFieldNames(t *testing.T) {
	for i, name := range fieldNames {
		if got, want := httpFieldNames[i], http.CanonicalHeaderKey(name); got != want {
			t.Errorf("httpFieldNames[%d] = %q, want %q", i, got, want)
		}
	}
}

// TestAllowedPathAllocations counts the allocations of the pieces of an
// admitted request outside Redis's transport: the decision's memory, its
// header fields and the client's identity.
func TestAllowedPathAllocations(t *testing.T) {
	set, err := newLimitSet([]Limit{PerMinute(100), PerHour(1000).Named("hourly")})
	if err != nil {
		t.Fatal(err)
	}
	reply := []int64{1, 0, 99, 0, 60_000_000, 999, 0, 3_600_000_000}
	if got := testing.AllocsPerRun(100, func() { _, _ = result(reply, &set, nil) }); got != 1 {
		t.Errorf("result() allocates %v times, want 1 (its decision)", got)
	}
	res, err := result(reply, &set, nil)
	if err != nil {
		t.Fatal(err)
	}
	hdr := http.Header{}
	Headers{}.SetHeader(res, hdr) // the map's own growth
	if got := testing.AllocsPerRun(100, func() {
		res.d.fields.claimed.Store(false) // as if each run had a fresh decision
		Headers{}.SetHeader(res, hdr)
	}); got != 0 {
		t.Errorf("SetHeader allocates %v times, want 0", got)
	}
	if got := testing.AllocsPerRun(100, func() { Headers{}.Write(res, func(string, string) {}) }); got != 1 {
		t.Errorf("Write of a Result whose fields were set allocates %v times, want 1 (fields of its own)", got)
	}
	for _, ip := range []string{"203.0.113.9", "::ffff:203.0.113.9", "2001:db8::1", "fe80::1%eth0"} {
		addr := netip.MustParseAddr(ip)
		if got, want := addrIdentity(addr, 0), IPIdentity(addr.String(), 0); got != want {
			t.Errorf("addrIdentity(%v) = %q, want %q", addr, got, want)
		}
		if got := testing.AllocsPerRun(100, func() { _ = addrIdentity(addr, 56) }); got != 1 {
			t.Errorf("addrIdentity(%v) allocates %v times, want 1", addr, got)
		}
	}
}
