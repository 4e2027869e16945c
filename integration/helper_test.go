package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// target names a Redis deployment so that another OS process can connect to
// it: one standalone address, or the seeds of a cluster.
type target struct {
	Cluster bool     `json:"cluster"`
	Addrs   []string `json:"addrs"`
}

// backend is a Redis deployment every fleet-level claim is proven on.
type backend struct {
	name   string
	client func(testing.TB) redis.UniversalClient
}

// backends returns the harness's standalone Redis and its Redis Cluster.
// Without the harness the standalone server is a private one and the
// cluster subtests skip, as redistest documents; under make test both run.
func backends() []backend {
	return []backend{
		{"standalone", func(t testing.TB) redis.UniversalClient { return redistest.Client(t) }},
		{"cluster", func(t testing.TB) redis.UniversalClient { return redistest.ClusterClient(t) }},
	}
}

// targetOf returns where rdb connects, for a helper process.
func targetOf(t testing.TB, rdb redis.UniversalClient) target {
	t.Helper()
	switch c := rdb.(type) {
	case *redis.Client:
		return target{Addrs: []string{c.Options().Addr}}
	case *redis.ClusterClient:
		return target{Cluster: true, Addrs: c.Options().Addrs}
	}
	t.Fatalf("targetOf(%T): unsupported client", rdb)
	return target{}
}

// newClient connects to tg with a pool of poolSize connections and go-redis's
// defaults otherwise, as an application would.
func newClient(tg target, poolSize int) redis.UniversalClient {
	if tg.Cluster {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: tg.Addrs, PoolSize: poolSize})
	}
	return redis.NewClient(&redis.Options{Addr: tg.Addrs[0], PoolSize: poolSize})
}

// forEachMaster runs fn on the standalone server, or on every primary of a
// cluster.
func forEachMaster(ctx context.Context, rdb redis.UniversalClient, fn func(context.Context, *redis.Client) error) error {
	switch c := rdb.(type) {
	case *redis.Client:
		return fn(ctx, c)
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, fn)
	}
	return fmt.Errorf("forEachMaster: unsupported client %T", rdb)
}

// newLimiter returns a limiter on rdb under the test's own key prefix.
func newLimiter(t testing.TB, rdb redis.Scripter, prefix string, limit slidelimit.Limit, opts ...slidelimit.Option) *slidelimit.Limiter {
	t.Helper()
	opts = append([]slidelimit.Option{slidelimit.WithPrefix(prefix)}, opts...)
	lim, err := slidelimit.New(rdb, limit, opts...)
	if err != nil {
		t.Fatalf("slidelimit.New(%v) = %v", limit, err)
	}
	return lim
}

// zcard returns the units identity's log under limit holds (its records left out).
func zcard(t testing.TB, rdb redis.UniversalClient, prefix, identity string, limit slidelimit.Limit) int64 {
	t.Helper()
	key, err := slidelimit.Key(prefix, identity, limit)
	if err != nil {
		t.Fatalf("Key(%q, %q, %v) = %v", prefix, identity, limit, err)
	}
	return logUnits(t, rdb, key)
}

// logUnits returns the units the exact log key holds.
func logUnits(t testing.TB, rdb redis.UniversalClient, key string) int64 {
	t.Helper()
	return redistest.ExactLogUnits(t, rdb, key)
}

// The helper-process protocol. The parent test re-executes its own binary
// with -test.run=^TestHelperProcess$ and the JSON of a helperConfig in
// envHelper. The helper connects, warms up its connection pool, prints
// lineReady, waits for one line on standard input (the start signal, sent
// to every helper at once), hammers the limiter and prints lineResult
// followed by the JSON of a helperReport.
const (
	envHelper  = "SLIDELIMIT_INTEGRATION_HELPER"
	lineReady  = "slidelimit-helper: ready"
	lineResult = "slidelimit-helper: result "
)

// helperConfig tells a helper process what to do.
type helperConfig struct {
	Target     target      `json:"target"`
	Prefix     string      `json:"prefix"`
	Identity   string      `json:"identity"`
	Limits     []limitSpec `json:"limits"`
	Costs      []int       `json:"costs"` // call i of goroutine g costs Costs[(g*Calls+i)%len(Costs)]
	Goroutines int         `json:"goroutines"`
	Calls      int         `json:"calls"` // per goroutine
	// PerCall passes Limits to every call (AllowLimits) to a limiter
	// built with a limit of its own that never binds.
	PerCall bool `json:"per_call"`
	// Tree, if set, decides every call with AllowTree on these levels of
	// the tenant Identity (Limits then only build the limiter).
	Tree []levelSpec `json:"tree,omitempty"`
}

// levelSpec is a slidelimit.Level as JSON.
type levelSpec struct {
	Identity string      `json:"identity"`
	Limits   []limitSpec `json:"limits"`
}

// limitSpec is a slidelimit.Limit as JSON.
type limitSpec struct {
	Quota  int           `json:"quota"`
	Window time.Duration `json:"window"`
	Step   time.Duration `json:"step,omitempty"`
}

func (s limitSpec) limit() slidelimit.Limit { return slidelimit.Per(s.Quota, s.Window).Stepped(s.Step) }

// helperReport is what a helper process admitted.
type helperReport struct {
	Allowed   int    `json:"allowed"`    // calls admitted
	Units     int    `json:"units"`      // units admitted: the sum of their costs
	Denied    int    `json:"denied"`     // calls denied by Redis
	MinDenied int    `json:"min_denied"` // smallest cost denied, 0 if none
	Errors    int    `json:"errors"`     // calls that returned an error
	FirstErr  string `json:"first_err"`  // the first such error
	// Positions are the places in the log of the units admitted: a
	// request of cost c that left its first limit r units has the places
	// quota-r-c+1 .. quota-r. With windows that do not slide during the
	// run, the places of a fleet's units are exactly 1..units.
	Positions []int `json:"positions"`
}

// TestHelperProcess is not a test: it is the body of the helper processes
// that TestExactnessAcrossProcesses starts. Run directly, it returns at once.
func TestHelperProcess(t *testing.T) {
	raw := os.Getenv(envHelper)
	if raw == "" {
		return
	}
	var cfg helperConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatalf("helper: decode %s: %v", envHelper, err)
	}
	if err := runHelper(t.Context(), cfg, os.Stdin, os.Stdout); err != nil {
		t.Fatalf("helper: %v", err)
	}
}

func runHelper(ctx context.Context, cfg helperConfig, in io.Reader, out io.Writer) error {
	rdb := newClient(cfg.Target, cfg.Goroutines)
	defer rdb.Close()
	limits := make([]slidelimit.Limit, len(cfg.Limits))
	for i, s := range cfg.Limits {
		limits[i] = s.limit()
	}
	// A generous timeout: under contention on a small machine a call may
	// wait, and a timeout would be a fail-open admit, not a Redis decision.
	own, more := limits[0], limits[1:]
	if cfg.PerCall {
		own, more = slidelimit.PerHour(slidelimit.MaxQuota), nil
	}
	lim, err := slidelimit.New(rdb, own, slidelimit.WithLimits(more...),
		slidelimit.WithPrefix(cfg.Prefix), slidelimit.WithTimeout(10*time.Second))
	if err != nil {
		return err
	}
	decide := lim.AllowN
	if len(cfg.Tree) > 0 {
		levels := make([]slidelimit.Level, len(cfg.Tree))
		for i, l := range cfg.Tree {
			levels[i].Identity = l.Identity
			for _, s := range l.Limits {
				levels[i].Limits = append(levels[i].Limits, s.limit())
			}
		}
		decide = func(ctx context.Context, tenant string, n int) (slidelimit.Result, error) {
			return lim.AllowTree(ctx, tenant, n, levels...)
		}
	}
	if cfg.PerCall {
		decide = func(ctx context.Context, identity string, n int) (slidelimit.Result, error) {
			return lim.AllowLimits(ctx, identity, n, limits...)
		}
	}

	// Warm up: open one connection per goroutine to the identity's shard
	// and load the script there. Peek records nothing.
	var wg sync.WaitGroup
	warm := make(chan error, cfg.Goroutines)
	for range cfg.Goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := lim.Peek(ctx, cfg.Identity)
			warm <- err
		}()
	}
	wg.Wait()
	close(warm)
	for err := range warm {
		if err != nil {
			return fmt.Errorf("warm up: %w", err)
		}
	}

	fmt.Fprintln(out, lineReady)
	if _, err := bufio.NewReader(in).ReadString('\n'); err != nil {
		return fmt.Errorf("wait for the start signal: %w", err)
	}

	var mu sync.Mutex
	var rep helperReport
	for g := range cfg.Goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range cfg.Calls {
				cost := cfg.Costs[(g*cfg.Calls+i)%len(cfg.Costs)]
				res, err := decide(ctx, cfg.Identity, cost)
				mu.Lock()
				switch {
				case err != nil:
					if rep.Errors == 0 {
						rep.FirstErr = err.Error()
					}
					rep.Errors++
				case res.Allowed:
					rep.Allowed++
					rep.Units += cost
					if s := res.Statuses; len(s) > 0 {
						last := s[0].Limit.Quota - s[0].Remaining
						for p := last - cost + 1; p <= last; p++ {
							rep.Positions = append(rep.Positions, p)
						}
					}
				default:
					rep.Denied++
					if rep.MinDenied == 0 || cost < rep.MinDenied {
						rep.MinDenied = cost
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	b, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, lineResult+string(b))
	return nil
}

// helper is one running helper process, seen from the parent.
type helper struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  *bufio.Scanner
	stderr *syncBuffer
}

// syncBuffer is a bytes.Buffer that a process may write while a test reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startHelpers starts n helper processes with cfg and waits until each is
// ready. They are killed when the test ends, if still running.
func startHelpers(t *testing.T, n int, cfg helperConfig) []*helper {
	t.Helper()
	return spawnHelpers(t, n, "TestHelperProcess", envHelper, cfg, 45*time.Second)
}

// spawnHelpers starts n copies of this test binary running only the test
// named test, with cfg as JSON in the environment variable env, within
// limit, and waits until each prints lineReady. They are killed when the
// test ends, if still running.
func spawnHelpers(t *testing.T, n int, test, env string, cfg any, limit time.Duration) []*helper {
	t.Helper()
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatalf("encode helper config: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), limit)
	t.Cleanup(cancel)
	hs := make([]*helper, n)
	for i := range hs {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
		// A race-enabled binary sleeps a second before it exits unless
		// told otherwise; the helpers have nothing to flush.
		gorace := strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0")
		cmd.Env = append(os.Environ(), env+"="+string(raw), "GORACE="+gorace)
		h := &helper{cmd: cmd, stderr: new(syncBuffer)}
		cmd.Stderr = h.stderr
		if h.stdin, err = cmd.StdinPipe(); err != nil {
			t.Fatalf("helper %d: stdin: %v", i, err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatalf("helper %d: stdout: %v", i, err)
		}
		h.lines = bufio.NewScanner(stdout)
		h.lines.Buffer(make([]byte, 64<<10), 16<<20) // a report may list every request
		if err := cmd.Start(); err != nil {
			t.Fatalf("helper %d: start %s: %v", i, os.Args[0], err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
		hs[i] = h
	}
	for i, h := range hs {
		if _, err := h.await(lineReady); err != nil {
			t.Fatalf("helper %d did not get ready: %v\n%s", i, err, h.stderr)
		}
	}
	return hs
}

// await reads lines until one starts with prefix and returns the rest of it.
func (h *helper) await(prefix string) (string, error) {
	var seen []string
	for h.lines.Scan() {
		line := h.lines.Text()
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			return rest, nil
		}
		seen = append(seen, line)
	}
	err := h.lines.Err()
	if err == nil {
		err = io.ErrUnexpectedEOF
	}
	return "", fmt.Errorf("%w; output: %q", err, seen)
}

// raceHelpers sends every helper the start signal, then collects their
// reports.
func raceHelpers(t *testing.T, hs []*helper) []helperReport {
	t.Helper()
	for i, h := range hs {
		if _, err := io.WriteString(h.stdin, "go\n"); err != nil {
			t.Fatalf("helper %d: send start: %v", i, err)
		}
	}
	reps := make([]helperReport, len(hs))
	for i, h := range hs {
		raw, err := h.await(lineResult)
		if err != nil {
			t.Fatalf("helper %d: no result: %v\n%s", i, err, h.stderr)
		}
		if err := json.Unmarshal([]byte(raw), &reps[i]); err != nil {
			t.Fatalf("helper %d: decode result %q: %v", i, raw, err)
		}
		_ = h.stdin.Close()
		if err := h.cmd.Wait(); err != nil && !errors.Is(err, os.ErrProcessDone) {
			t.Fatalf("helper %d: %v\n%s", i, err, h.stderr)
		}
	}
	return reps
}

// long skips a long fleet or fault test under go test -short, as make test
// runs the suite; make check runs it.
func long(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("a long fleet or fault test: make check runs it")
	}
}
