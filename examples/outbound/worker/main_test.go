package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/core/redistest"
)

func TestWorkersShareTheLimit(t *testing.T) {
	var mu sync.Mutex
	var arrivals []time.Time
	partner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrivals = append(arrivals, time.Now())
		first := len(arrivals) == 1
		mu.Unlock()
		if first {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	t.Cleanup(partner.Close)
	t.Setenv("TARGET_URL", partner.URL)
	// One request per 300 ms, so that the throttled first request is the
	// only one on its way when the partner answers it.
	t.Setenv("LIMIT", "1/300ms")
	t.Setenv("WORKERS", "4")
	t.Setenv("REQUESTS", "7")
	t.Setenv("REDIS_URL", "redis://"+redistest.Client(t).Options().Addr+"/0")

	var out bytes.Buffer
	if err := run(t.Context(), &out); err != nil {
		t.Fatalf("run = %v", err)
	}
	t.Log(out.String())
	for _, want := range []string{"sent 7 requests", "6× 200, 1× 429", "throttled by the partner 1 times"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	mu.Lock()
	defer mu.Unlock()
	// The partner's 429 asked for a second: nothing came during it.
	if gap := arrivals[1].Sub(arrivals[0]); gap < time.Second {
		t.Errorf("second request arrived %v after the 429's Retry-After: 1, want at least 1 s", gap)
	}
	for i := 1; i < len(arrivals); i++ {
		if d := arrivals[i].Sub(arrivals[i-1]); d < 300*time.Millisecond {
			t.Errorf("arrivals %d and %d are %v apart: 2 in one 300 ms window", i-1, i, d)
		}
	}
}

func TestReadSettings(t *testing.T) {
	t.Setenv("TARGET_URL", "")
	if _, err := readSettings(); err == nil {
		t.Error("readSettings without TARGET_URL = nil error, want one")
	}
	t.Setenv("TARGET_URL", "http://127.0.0.1:9/")
	t.Setenv("LIMIT", "10/1s")
	t.Setenv("MARGIN", "50ms")
	s, err := readSettings()
	if err != nil || s.limit.Quota != 10 || s.limit.Window != 1050*time.Millisecond || s.workers != 8 || s.requests != 100 {
		t.Errorf("readSettings = %+v, %v; want 10 per 1.05 s, 8 workers, 100 requests", s, err)
	}
	for name, bad := range map[string]string{"LIMIT": "ten", "MARGIN": "-1s", "WORKERS": "0", "REQUESTS": "x"} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(name, bad)
			if _, err := readSettings(); err == nil {
				t.Errorf("readSettings with %s=%q = nil error, want one", name, bad)
			}
		})
	}
}
