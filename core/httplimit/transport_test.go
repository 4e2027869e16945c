package httplimit_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/httplimit"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// partner is a test server standing for a partner API: it records every
// request that reaches it and answers with the status its answer func
// picks.
type partner struct {
	*httptest.Server
	mu      sync.Mutex
	headers []http.Header
	answer  func(n int, w http.ResponseWriter) // n counts requests from 1
	onHit   func()
}

func newPartner(t *testing.T) *partner {
	t.Helper()
	p := &partner{}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.headers = append(p.headers, r.Header.Clone())
		n, answer, onHit := len(p.headers), p.answer, p.onHit
		p.mu.Unlock()
		if onHit != nil {
			onHit()
		}
		if answer != nil {
			answer(n, w)
		}
	}))
	t.Cleanup(p.Close)
	return p
}

func (p *partner) hits() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.headers)
}

// outboundLimiter returns a limiter on rdb under prefix.
func outboundLimiter(t *testing.T, rdb redis.Scripter, prefix string, limit slidelimit.Limit) *slidelimit.Limiter {
	t.Helper()
	lim, err := slidelimit.New(rdb, limit, slidelimit.WithPrefix(prefix), slidelimit.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatalf("slidelimit.New: %v", err)
	}
	return lim
}

func sendGET(ctx context.Context, t *testing.T, c *http.Client, url string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatalf("NewRequest: %v", err)
	}
	resp, err := c.Do(req)
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	return resp, err
}

func TestTransportWaitsForTheLimitAndSetsNothing(t *testing.T) {
	rdb := redistest.Client(t)
	p := newPartner(t)
	limit := slidelimit.Per(3, 400*time.Millisecond)
	prefix := redistest.Prefix(t)
	lim := outboundLimiter(t, rdb, prefix, limit)
	client := &http.Client{Transport: httplimit.NewTransport(lim)}
	plain := &http.Client{Transport: http.DefaultTransport}

	if _, err := sendGET(t.Context(), t, plain, p.URL); err != nil {
		t.Fatalf("plain GET: %v", err)
	}
	for i := range 7 {
		resp, err := sendGET(t.Context(), t, client, p.URL)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %d through the Transport = %v, %v, want 200", i, resp, err)
		}
	}
	if got := p.hits(); got != 8 {
		t.Fatalf("partner saw %d requests, want 8", got)
	}
	// Seven waited for their turn: the log never holds more than 3.
	key, _ := slidelimit.Key(prefix, "host:"+strings.TrimPrefix(p.URL, "http://"), limit)
	if n, err := rdb.ZCount(t.Context(), key, "0", "+inf").Result(); err != nil || n > 3 || n < 1 {
		t.Errorf("ZCARD %s = %d, %v, want 1..3", key, n, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, h := range p.headers[1:] {
		if len(h) != len(p.headers[0]) {
			t.Errorf("request %d through the Transport carried %v, want the fields of a plain request %v", i, h, p.headers[0])
		}
		for name := range h {
			if _, ok := p.headers[0][name]; !ok {
				t.Errorf("request %d through the Transport carried %s, which a plain request does not", i, name)
			}
		}
	}
}

func TestTransportBlocksEveryProcessOnRetryAfter(t *testing.T) {
	rdb := redistest.Client(t)
	p := newPartner(t)
	prefix := redistest.Prefix(t)
	// Two limiters on one prefix stand for two processes.
	first := outboundLimiter(t, rdb, prefix, slidelimit.PerMinute(100))
	second := outboundLimiter(t, rdb, prefix, slidelimit.PerMinute(100))
	key := "host:" + strings.TrimPrefix(p.URL, "http://")
	var blockedAtArrival []time.Duration
	p.answer = func(n int, w http.ResponseWriter) {
		if n == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}
	p.onHit = func() {
		left, err := first.Blocked(context.Background(), key)
		if err != nil {
			t.Errorf("Blocked: %v", err)
		}
		p.mu.Lock()
		blockedAtArrival = append(blockedAtArrival, left)
		p.mu.Unlock()
	}
	resp, err := sendGET(t.Context(), t, &http.Client{Transport: httplimit.NewTransport(first)}, p.URL)
	if err != nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("first GET = %v, %v, want the partner's 429 passed through", resp, err)
	}
	if left, err := second.Blocked(t.Context(), key); err != nil || left <= 0 {
		t.Fatalf("Blocked(%s) seen by another process = %v, %v, want the partner's Retry-After", key, left, err)
	}
	resp, err = sendGET(t.Context(), t, &http.Client{Transport: httplimit.NewTransport(second)}, p.URL)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("second GET = %v, %v, want 200 after the block", resp, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(blockedAtArrival) != 2 || blockedAtArrival[1] != 0 {
		t.Errorf("block left when each request arrived = %v, want [_ 0]: the second arrived during the block", blockedAtArrival)
	}
}

func TestTransportRefusesADeadlineInsideABlock(t *testing.T) {
	rdb := redistest.Client(t)
	p := newPartner(t)
	lim := outboundLimiter(t, rdb, redistest.Prefix(t), slidelimit.PerMinute(100))
	key := "host:" + strings.TrimPrefix(p.URL, "http://")
	if err := lim.Block(t.Context(), key, 5*time.Second); err != nil {
		t.Fatalf("Block: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	body := &closeRecorder{Reader: strings.NewReader("payload")}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, p.URL, body)
	_, err := (&http.Client{Transport: httplimit.NewTransport(lim)}).Do(req)
	if !errors.Is(err, slidelimit.ErrWouldExceedDeadline) || ctx.Err() != nil {
		t.Errorf("POST with a 1 s deadline in a 5 s block = %v (context %v), want ErrWouldExceedDeadline at once", err, ctx.Err())
	}
	if p.hits() != 0 || !body.closed {
		t.Errorf("partner saw %d requests, body closed %v; want 0 and true", p.hits(), body.closed)
	}
}

func TestTransportKeyErrorSendsNothing(t *testing.T) {
	rdb := redistest.Client(t)
	p := newPartner(t)
	lim := outboundLimiter(t, rdb, redistest.Prefix(t), slidelimit.PerMinute(100))
	boom := errors.New("boom")
	tr := httplimit.NewTransport(lim, httplimit.WithRequestKey(func(*http.Request) (string, error) { return "", boom }))
	if _, err := sendGET(t.Context(), t, &http.Client{Transport: tr}, p.URL); !errors.Is(err, boom) {
		t.Errorf("GET with a failing key = %v, want it wrapped", err)
	}
	if p.hits() != 0 {
		t.Errorf("partner saw %d requests, want 0", p.hits())
	}
	if _, err := httplimit.NewTransport(nil).RoundTrip(httptest.NewRequest(http.MethodGet, p.URL, nil)); err == nil {
		t.Error("RoundTrip without a limiter = nil error, want one")
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		value string
		want  time.Duration
		ok    bool
	}{
		{"5", 5 * time.Second, true},
		{" 0 ", 0, true},
		{"", 0, false},
		{"-1", 0, false},
		{"soon", 0, false},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0, true},
		{"99999999999", slidelimit.MaxBlock, true},
	}
	for _, tt := range tests {
		got, ok := httplimit.RetryAfter(tt.value, now)
		if got != tt.want || ok != tt.ok {
			t.Errorf("RetryAfter(%q) = %v, %v, want %v, %v", tt.value, got, ok, tt.want, tt.ok)
		}
	}
}

type closeRecorder struct {
	io.Reader
	closed bool
}

func (c *closeRecorder) Close() error {
	c.closed = true
	return nil
}

// TestTransportCountsWhenALateRequestLeaves: of ten workers, each request
// on a connection of its own, the first dials for 300 ms (a fleet's start
// on a busy host), far past the window's 20 ms margin, while the others
// send at once. The partner counts arrivals in an exact window of 1 s: without
// moving the late request's admission to when it was answered, the limiter
// would admit the next five as soon as the first ones' window passed, and
// the partner would see six in one window.
func TestTransportCountsWhenALateRequestLeaves(t *testing.T) {
	var first sync.Once
	base := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		first.Do(func() { time.Sleep(300 * time.Millisecond) })
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}, DisableKeepAlives: true}
	t.Cleanup(base.CloseIdleConnections)
	partnerCountsWithin(t, base, func() {})
}

// TestTransportCountsWhenThePartnerCountsLate: the request leaves at once,
// but the partner counts the first one 300 ms after it arrived (a partner
// that accepts or schedules slowly while a fleet starts), far past the
// window's 20 ms margin. Without moving the admission to when the response
// came, the limiter would admit the next five as soon as the first ones'
// window passed, and the partner would count six in one window.
func TestTransportCountsWhenThePartnerCountsLate(t *testing.T) {
	var first sync.Once
	partnerCountsWithin(t, http.DefaultTransport, func() {
		first.Do(func() { time.Sleep(300 * time.Millisecond) })
	})
}

// partnerCountsWithin runs ten workers for 2.6 s through a Transport over
// base, under 5 per second with a margin of 20 ms, against a partner that
// runs before before it counts each arrival, and fails the test if the
// partner counts more than 5 in any window of 1 s.
func partnerCountsWithin(t *testing.T, base http.RoundTripper, before func()) {
	t.Helper()
	rdb := redistest.Client(t)
	const quota, window, margin = 5, time.Second, 20 * time.Millisecond
	var mu sync.Mutex
	var arrivals []time.Time
	partner := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		before()
		mu.Lock()
		arrivals = append(arrivals, time.Now())
		mu.Unlock()
	}))
	t.Cleanup(partner.Close)
	lim := outboundLimiter(t, rdb, redistest.Prefix(t), slidelimit.Per(quota, window+margin))
	client := &http.Client{Transport: httplimit.NewTransport(lim, httplimit.WithBase(base))}
	ctx, cancel := context.WithTimeout(t.Context(), 2600*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				_, _ = sendGET(ctx, t, client, partner.URL)
			}
		}()
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	slices.SortFunc(arrivals, func(a, b time.Time) int { return a.Compare(b) })
	most := 0
	for i := range arrivals {
		n := 0
		for j := i; j < len(arrivals) && arrivals[j].Sub(arrivals[i]) < window; j++ {
			n++
		}
		most = max(most, n)
	}
	if len(arrivals) < quota+1 {
		t.Fatalf("the partner counted %d requests in 2.6 s, want more than %d: the test did not run", len(arrivals), quota)
	}
	if most > quota {
		t.Errorf("the partner counted %d requests in one window of %v, want at most %d", most, window, quota)
	}
}
