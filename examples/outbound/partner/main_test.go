package main

import (
	"net/http"
	"testing"
	"time"
)

func TestPartnerCountsAnExactWindow(t *testing.T) {
	p := &partner{quota: 2, window: time.Second, throttleAt: 5, retryAfter: 7}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	steps := []struct {
		at         time.Duration
		status     int
		retryAfter int
	}{
		{0, http.StatusOK, 0},
		{100 * time.Millisecond, http.StatusOK, 0},
		{999 * time.Millisecond, http.StatusTooManyRequests, 1},  // the window holds 2
		{time.Second, http.StatusOK, 0},                          // the first left at 1 s
		{1050 * time.Millisecond, http.StatusTooManyRequests, 7}, // THROTTLE_AT 5
	}
	for i, s := range steps {
		status, retry := p.arrive(t0.Add(s.at))
		if status != s.status || retry != s.retryAfter {
			t.Errorf("arrival %d at +%v = %d, Retry-After %d; want %d, %d", i+1, s.at, status, retry, s.status, s.retryAfter)
		}
	}
	if got := p.snapshot(); got.Arrivals != 5 || got.Over != 1 {
		t.Errorf("stats = %+v, want 5 arrivals, 1 over the limit", got)
	}
}

func TestParseLimit(t *testing.T) {
	if q, w, err := parseLimit("100/10s"); err != nil || q != 100 || w != 10*time.Second {
		t.Errorf("parseLimit(100/10s) = %d, %v, %v", q, w, err)
	}
	for _, bad := range []string{"", "100", "x/1s", "5/soon", "0/1s"} {
		if _, _, err := parseLimit(bad); err == nil {
			t.Errorf("parseLimit(%q) = nil error, want one", bad)
		}
	}
}
