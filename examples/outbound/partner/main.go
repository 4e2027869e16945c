// Command partner stands for a partner API that enforces its own exact
// sliding-window limit, to run the worker example against. It counts the
// requests that reach it: any it receives while its last window already
// holds the quota it answers 429 Too Many Requests with a Retry-After, as a
// strict partner would, and counts as over the limit. GET /stats (not
// counted) reports, as JSON, how many requests arrived and how many of them
// were over the limit.
//
// Environment:
//
//	ADDR         listen address (default "127.0.0.1:9090")
//	LIMIT        quota/window (default "100/10s")
//	THROTTLE_AT  answer the request of this number (from 1) with 429 and
//	             Retry-After: RETRY_AFTER, whatever its window holds
//	             (default 0: never)
//	RETRY_AFTER  seconds, for THROTTLE_AT (default 5)
//
// It prints its stats and stops on SIGINT or SIGTERM.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Stdout)
	stop()
	if err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, out io.Writer) error {
	quota, window, err := parseLimit(envOr("LIMIT", "100/10s"))
	if err != nil {
		return fmt.Errorf("LIMIT: %w", err)
	}
	throttleAt, err := strconv.Atoi(envOr("THROTTLE_AT", "0"))
	if err != nil {
		return fmt.Errorf("THROTTLE_AT: %w", err)
	}
	retryAfter, err := strconv.Atoi(envOr("RETRY_AFTER", "5"))
	if err != nil || retryAfter < 0 {
		return fmt.Errorf("RETRY_AFTER: %q is not a number of seconds", os.Getenv("RETRY_AFTER"))
	}
	p := &partner{quota: quota, window: window, throttleAt: throttleAt, retryAfter: retryAfter}
	ln, err := net.Listen("tcp", envOr("ADDR", "127.0.0.1:9090"))
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 5 * time.Second}
	log.Printf("partner listening on %s, limit %d per %v", ln.Addr(), quota, window)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return json.NewEncoder(out).Encode(p.snapshot())
}

// partner keeps the log of one exact sliding window. It is safe for
// concurrent use.
type partner struct {
	quota      int
	window     time.Duration
	throttleAt int
	retryAfter int

	mu       sync.Mutex
	recent   []time.Time // admissions of the last window, oldest first
	arrivals int
	over     int // requests that arrived while the window was full
}

// stats is what GET /stats reports.
type stats struct {
	Arrivals int    `json:"arrivals"`
	Over     int    `json:"over_limit"`
	Limit    string `json:"limit"`
}

func (p *partner) snapshot() stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return stats{Arrivals: p.arrivals, Over: p.over, Limit: fmt.Sprintf("%d/%v", p.quota, p.window)}
}

func (p *partner) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/stats" {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(p.snapshot())
		return
	}
	status, retry := p.arrive(time.Now())
	if status != http.StatusOK {
		w.Header().Set("Retry-After", strconv.Itoa(retry))
		http.Error(w, "slow down", status)
		return
	}
	fmt.Fprintln(w, "ok")
}

// arrive counts a request arriving at now and returns the answer's status
// and, for a 429, its Retry-After in seconds.
func (p *partner) arrive(now time.Time) (int, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.arrivals++
	k := 0
	for k < len(p.recent) && !p.recent[k].After(now.Add(-p.window)) {
		k++
	}
	p.recent = p.recent[k:]
	if p.arrivals == p.throttleAt {
		return http.StatusTooManyRequests, p.retryAfter
	}
	if len(p.recent) >= p.quota {
		p.over++
		retry := p.recent[0].Add(p.window).Sub(now)
		return http.StatusTooManyRequests, int((retry + time.Second - 1) / time.Second)
	}
	p.recent = append(p.recent, now)
	return http.StatusOK, 0
}

func parseLimit(v string) (int, time.Duration, error) {
	q, w, ok := strings.Cut(v, "/")
	quota, err := strconv.Atoi(q)
	if !ok || err != nil || quota < 1 {
		return 0, 0, fmt.Errorf("%q is not quota/window", v)
	}
	window, err := time.ParseDuration(w)
	if err != nil || window <= 0 {
		return 0, 0, fmt.Errorf("%q is not quota/window", v)
	}
	return quota, window, nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
