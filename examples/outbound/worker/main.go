// Command worker calls a partner's URL under a limit that every worker
// process on one Redis shares, the way a fleet shares a partner API's quota:
// its workers wait for their turn (slidelimit's httplimit.Transport) instead
// of failing, and when the partner answers 429 or 503 with Retry-After,
// every worker of every process stops until then.
//
// Environment:
//
//	TARGET_URL           the URL to GET (required)
//	LIMIT                the partner's limit, quota/window (default "100/10s")
//	MARGIN               added to the limit's window, to absorb the spread of
//	                     the delay between admission and arrival at the
//	                     partner (default "100ms")
//	WORKERS              concurrent workers in this process (default 8)
//	REQUESTS             requests this process sends in all (default 100)
//	REDIS_URL            Redis to use (default "redis://127.0.0.1:6379/0")
//	REDIS_CLUSTER_ADDRS  host:port,host:port,... selects Redis Cluster instead
//
// At the end it prints what it sent, how long its requests waited for the
// limit and how often the partner throttled it. SIGINT or SIGTERM stops it
// early, with the same report.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/httplimit"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Stdout)
	stop()
	if err != nil {
		log.Fatal(err)
	}
}

// settings are the worker's environment, parsed.
type settings struct {
	target   string
	limit    slidelimit.Limit // the partner's, its window widened by margin
	margin   time.Duration
	workers  int
	requests int
}

func readSettings() (settings, error) {
	s := settings{target: os.Getenv("TARGET_URL")}
	if s.target == "" {
		return s, errors.New("TARGET_URL is required")
	}
	limit, err := parseLimit(envOr("LIMIT", "100/10s"))
	if err != nil {
		return s, fmt.Errorf("LIMIT: %w", err)
	}
	margin, err := time.ParseDuration(envOr("MARGIN", "100ms"))
	if err != nil || margin < 0 {
		return s, fmt.Errorf("MARGIN: %q is not a duration of zero or more", os.Getenv("MARGIN"))
	}
	limit.Window += margin
	s.limit, s.margin = limit, margin
	if s.workers, err = positive("WORKERS", 8); err != nil {
		return s, err
	}
	if s.requests, err = positive("REQUESTS", 100); err != nil {
		return s, err
	}
	return s, nil
}

// parseLimit reads "quota/window", such as "100/10s" or "600/1m".
func parseLimit(v string) (slidelimit.Limit, error) {
	q, w, ok := strings.Cut(v, "/")
	quota, err := strconv.Atoi(q)
	if !ok || err != nil {
		return slidelimit.Limit{}, fmt.Errorf("%q is not quota/window", v)
	}
	window, err := time.ParseDuration(w)
	if err != nil {
		return slidelimit.Limit{}, fmt.Errorf("%q is not quota/window: %w", v, err)
	}
	limit := slidelimit.Per(quota, window)
	return limit, limit.Validate()
}

func positive(name string, def int) (int, error) {
	n, err := strconv.Atoi(envOr(name, strconv.Itoa(def)))
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%s: %q is not a positive number", name, os.Getenv(name))
	}
	return n, nil
}

// report is what one process did.
type report struct {
	mu        sync.Mutex
	statuses  map[int]int
	failed    int
	firstErr  error
	waits     []time.Duration
	throttled int
}

// run sends the requests and prints the report.
func run(ctx context.Context, out io.Writer) error {
	s, err := readSettings()
	if err != nil {
		return err
	}
	rdb, err := newRedis()
	if err != nil {
		return err
	}
	defer rdb.Close()
	lim, err := slidelimit.New(rdb, s.limit)
	if err != nil {
		return err
	}
	rep := &report{statuses: make(map[int]int)}
	start := time.Now()
	send(ctx, &http.Client{Transport: newTransport(lim, s.workers)}, s, rep)
	rep.print(out, time.Since(start), s)
	return nil
}

// waitKey is the context key under which a request carries the moment its
// worker asked to send it; sentAt notes when it left.
type waitKey struct{}

// newTransport limits requests with lim, and measures each request's wait:
// the time from the worker's call to the moment the request goes out.
func newTransport(lim *slidelimit.Limiter, workers int) http.RoundTripper {
	base := &http.Transport{MaxIdleConnsPerHost: workers}
	measured := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if w, ok := r.Context().Value(waitKey{}).(*waitClock); ok {
			w.sent = time.Now()
		}
		return base.RoundTrip(r)
	})
	return httplimit.NewTransport(lim, httplimit.WithBase(measured))
}

type waitClock struct{ asked, sent time.Time }

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// send runs s.workers workers until s.requests requests are done.
func send(ctx context.Context, client *http.Client, s settings, rep *report) {
	jobs := make(chan struct{})
	var wg sync.WaitGroup
	for range s.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range jobs {
				rep.add(do(ctx, client, s.target))
			}
		}()
	}
	for range s.requests {
		select {
		case jobs <- struct{}{}:
		case <-ctx.Done():
		}
	}
	close(jobs)
	wg.Wait()
}

// outcome is one request's.
type outcome struct {
	status int
	err    error
	wait   time.Duration
}

func do(ctx context.Context, client *http.Client, target string) outcome {
	clock := &waitClock{asked: time.Now()}
	req, err := http.NewRequestWithContext(context.WithValue(ctx, waitKey{}, clock), http.MethodGet, target, nil)
	if err != nil {
		return outcome{err: err}
	}
	resp, err := client.Do(req)
	o := outcome{err: err}
	if !clock.sent.IsZero() {
		o.wait = clock.sent.Sub(clock.asked)
	}
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		o.status = resp.StatusCode
	}
	return o
}

func (r *report) add(o outcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if o.err != nil {
		if r.failed == 0 {
			r.firstErr = o.err
		}
		r.failed++
		return
	}
	r.statuses[o.status]++
	r.waits = append(r.waits, o.wait)
	if o.status == http.StatusTooManyRequests || o.status == http.StatusServiceUnavailable {
		r.throttled++
	}
}

func (r *report) print(out io.Writer, took time.Duration, s settings) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sent := len(r.waits)
	codes := make([]int, 0, len(r.statuses))
	for c := range r.statuses {
		codes = append(codes, c)
	}
	sort.Ints(codes)
	var parts []string
	for _, c := range codes {
		parts = append(parts, fmt.Sprintf("%d× %d", r.statuses[c], c))
	}
	fmt.Fprintf(out, "sent %d requests to %s in %v (%s), %d workers, limit %d/%v (with a margin of %v) shared through Redis\n",
		sent, s.target, took.Round(time.Millisecond), strings.Join(parts, ", "), s.workers, s.limit.Quota, s.limit.Window-s.margin, s.margin)
	var total, most time.Duration
	for _, w := range r.waits {
		total += w
		most = max(most, w)
	}
	if sent > 0 {
		fmt.Fprintf(out, "waited for the limit %v in all: %v per request on average, %v at most\n",
			total.Round(time.Millisecond), (total / time.Duration(sent)).Round(time.Millisecond), most.Round(time.Millisecond))
	}
	fmt.Fprintf(out, "throttled by the partner %d times\n", r.throttled)
	if r.failed > 0 {
		fmt.Fprintf(out, "%d requests not sent or failed, the first: %v\n", r.failed, r.firstErr)
	}
}

func newRedis() (redis.UniversalClient, error) {
	if addrs := os.Getenv("REDIS_CLUSTER_ADDRS"); addrs != "" {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(addrs, ","), ContextTimeoutEnabled: true}), nil
	}
	opt, err := redis.ParseURL(envOr("REDIS_URL", "redis://127.0.0.1:6379/0"))
	if err != nil {
		return nil, fmt.Errorf("REDIS_URL: %w", err)
	}
	opt.ContextTimeoutEnabled = true
	return redis.NewClient(opt), nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
