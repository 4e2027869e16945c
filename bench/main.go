// Command bench measures slidelimit beside its peers and beside what Redis
// itself can run of slidelimit's script, on one Redis, in one run: make
// bench runs it against a throwaway server (scripts/bench.sh).
//
// Contenders, each through one shared go-redis client (ContextTimeoutEnabled,
// default pool):
//
//   - slidelimit (core), with its deny cache on as by default, and on the
//     denied path once more with WithDenyCache(0); on the allowed path once
//     more as slidelimit-plain, through a client of go-redis's defaults
//     (ContextTimeoutEnabled off, so a lone call's I/O runs on a goroutine
//     of the limiter's while its caller keeps the timeout);
//   - go-redis/redis_rate v10 (GCRA);
//   - ulule/limiter v3 with its Redis store (fixed window);
//   - the classic sliding-log script (ZREMRANGEBYSCORE, ZCARD, ZADD, PEXPIRE;
//     member "<ms>-<uuid>"; plain Script.Run);
//   - redis-benchmark running the allow script by EVALSHA, unpipelined and with
//     -P 16: the ceilings, at 64 and 256 clients.
//
// Paths: allowed (1,000 identities, a quota of 1,000,000 per minute, so every
// call is admitted and writes) and denied (one identity, exhausted before
// timing). Every cell (path, callers, contender) runs for BENCH_CELL on a key
// prefix of its own and is repeated BENCH_REPS times, the contenders
// interleaved in a rotating order; the tables print the median of the
// repetitions, and a ratio is the median of the repetitions' ratios (each
// of two cells run back to back) with their range. The machine is shared
// and noisy: compare columns of one run. Beside the rate and latency, a
// cell shows Redis's CPU per decision (INFO cpu) and the decisions per
// script call Redis ran (EVALSHA and EVAL in INFO commandstats): 1 for a
// contender that sends a call per decision, more where batches carry
// several.
//
// BENCH_CPUPROFILE=file writes a CPU profile of the Go side.
// BENCH_ROTATE=k turns the rotating order k places further: a run of one
// repetition (scripts/bench-pair.sh) passes its round, so that no contender
// runs first in every round.
// BENCH_CONTENDERS=slidelimit,ulule,ceiling runs only the contenders named.
//
// It then prints the Redis memory per in-window request and per identity
// (MEMORY USAGE) and the zset-max-listpack-entries trade-off.
package main

import (
	"bufio"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/ulule/limiter/v3"
	ulredis "github.com/ulule/limiter/v3/drivers/store/redis"
)

const (
	identities  = 1000
	deniedQuota = 10 // per hour: exhausted before timing
)

// quota returns the per-minute quota of an admitting path: on "allowed",
// the largest slidelimit counts exactly (MaxExactQuota, 1,000: no identity
// reaches it within a cell, so every call is admitted); on "stepped", the
// largest it takes (MaxQuota), which it counts in steps (Limit.Stepped).
// The peers get the same quota on both.
func quota(path string) int {
	if path == "stepped" {
		// A quota no run reaches, below 2^20 as it has always been, so that
		// its admissions get the allow script's short reply as every quota
		// of that size does (MaxQuota, 10^12, would not).
		return 1_000_000
	}
	return slidelimit.MaxExactQuota
}

// admitting reports whether every call of path is admitted.
func admitting(path string) bool { return path != "denied" }

// classicSource is the sliding-log script most Redis rate-limiting posts
// show, as a baseline.
const classicSource = `
local now = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, now - window)
local count = redis.call('ZCARD', KEYS[1])
if count < limit then
  redis.call('ZADD', KEYS[1], now, ARGV[4])
  redis.call('PEXPIRE', KEYS[1], window)
  return {1, limit - count - 1}
end
return {0, 0}
`

var classicScript = redis.NewScript(classicSource)

// decideFunc makes one decision for a random identity (allowed path) or the
// exhausted one (denied path) and reports whether it was admitted.
type decideFunc func(ctx context.Context, r *rand.Rand) (bool, error)

// contender sets up one library for one cell: its keys start with prefix.
type contender struct {
	name  string
	paths []string // the paths it runs on
	setup func(ctx context.Context, b *bench, path, prefix string) (decideFunc, error)
}

type bench struct {
	rdb      *redis.Client
	plain    *redis.Client // go-redis's defaults: ContextTimeoutEnabled off
	host     string
	port     string
	sha      string // the allow script's
	script   string // a file holding another allow script to measure (BENCH_SCRIPT), or ""
	cell     time.Duration
	reps     int
	rotate   int // added to the rotation of the contenders' order
	levels   []int
	cellSeq  atomic.Int64
	results  map[cellKey][]cell
	resultMu sync.Mutex
}

type cellKey struct {
	path      string
	callers   int
	contender string
}

// cell is one timed run.
type cell struct {
	decisions  int64
	rate       float64 // decisions per second
	p50, p99   time.Duration
	cpuPerCall float64 // Redis CPU µs per decision (user + sys)
	perScript  float64 // decisions per script call Redis ran (EVALSHA and EVAL); 0 if unknown
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	addr := os.Getenv("SLIDELIMIT_REDIS_ADDR")
	if addr == "" {
		return errors.New("SLIDELIMIT_REDIS_ADDR is not set; run make bench")
	}
	host, port, _ := strings.Cut(addr, ":")
	b := &bench{
		rdb:     redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true}),
		host:    host,
		port:    port,
		script:  envString("BENCH_SCRIPT", ""),
		cell:    envDuration("BENCH_CELL", 1500*time.Millisecond),
		reps:    envInt("BENCH_REPS", 3),
		rotate:  envInt("BENCH_ROTATE", 0),
		levels:  envInts("BENCH_LEVELS", []int{1, 16, 64, 256}),
		results: map[cellKey][]cell{},
	}
	defer b.rdb.Close()
	b.plain = redis.NewClient(&redis.Options{Addr: addr})
	defer b.plain.Close()
	ctx := context.Background()
	if path := os.Getenv("BENCH_CPUPROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	src, err := allowSource(b.script)
	if err != nil {
		return err
	}
	if b.sha, err = b.rdb.ScriptLoad(ctx, src).Result(); err != nil {
		return err
	}
	if err := b.rdb.ConfigSet(ctx, "zset-max-listpack-entries", "128").Err(); err != nil {
		return err
	}
	b.describe(ctx)
	if os.Getenv("BENCH_LONG_ONLY") != "" {
		return b.longWindows(ctx)
	}

	contenders := []contender{
		{"slidelimit", []string{"allowed", "stepped", "denied"}, setupSlidelimit(true)},
		{"slidelimit-nocache", []string{"denied"}, setupSlidelimit(false)},
		{"slidelimit-plain", []string{"allowed"}, setupSlidelimitPlain},
		{"redis_rate", []string{"allowed", "stepped", "denied"}, setupRedisRate},
		{"ulule", []string{"allowed", "stepped", "denied"}, setupUlule},
		{"classic", []string{"allowed", "stepped", "denied"}, setupClassic},
	}
	only := envStrings("BENCH_CONTENDERS", nil)
	start := time.Now()
	for rep := range b.reps {
		for _, path := range envStrings("BENCH_PATHS", []string{"allowed", "stepped", "denied"}) {
			for _, c := range b.levels {
				var order []func() error
				for _, ct := range contenders {
					if slices.Contains(ct.paths, path) && (only == nil || slices.Contains(only, ct.name)) {
						order = append(order, func() error { return b.runGo(ctx, ct, path, c) })
					}
				}
				if path == "allowed" && (c == 64 || c == 256) && (only == nil || slices.Contains(only, "ceiling")) {
					order = append(order,
						func() error { return b.runCeiling(ctx, c, 1) },
						func() error { return b.runCeiling(ctx, c, 16) })
				}
				// Rotate the order each repetition and level, so no
				// contender always runs first or after the same one.
				k := (rep + c + b.rotate) % len(order)
				order = append(order[k:], order[:k]...)
				for _, f := range order {
					if err := f(); err != nil {
						return err
					}
				}
			}
		}
		fmt.Fprintf(os.Stderr, "bench: repetition %d of %d done after %v\n", rep+1, b.reps, time.Since(start).Round(time.Second))
	}
	b.report()
	if os.Getenv("BENCH_SKIP_MEMORY") != "" {
		return nil
	}
	if err := b.memory(ctx); err != nil {
		return err
	}
	if err := b.listpack(ctx); err != nil {
		return err
	}
	if err := b.longWindows(ctx); err != nil {
		return err
	}
	fmt.Printf("\nwhole run: %v\n", time.Since(start).Round(time.Second))
	return nil
}

// describe prints the machine.
func (b *bench) describe(ctx context.Context) {
	model := "unknown CPU"
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	info, _ := b.rdb.Info(ctx, "server").Result()
	fmt.Printf("machine: %d cores (%s), Redis %s, %s %s/%s, go-redis client with ContextTimeoutEnabled and the default pool\n",
		numCPU(), model, infoField(info, "redis_version"), goVersion(), goos(), goarch())
	fmt.Printf("cells: %v each, median of %d interleaved repetitions; allowed path: %d identities, %d per minute (exact); stepped path: the same at %d per minute; denied path: one identity past %d per hour\n",
		b.cell, b.reps, identities, quota("allowed"), quota("stepped"), deniedQuota)
	out, _ := exec.Command("uptime").Output()
	fmt.Printf("load at start: %s", out)
}

func (b *bench) prefix(name string) string {
	return fmt.Sprintf("bench:%d:%s:", b.cellSeq.Add(1), name)
}

func identity(r *rand.Rand) string {
	return strconv.Itoa(r.IntN(identities))
}

func setupSlidelimit(cache bool) func(ctx context.Context, b *bench, path, prefix string) (decideFunc, error) {
	return func(ctx context.Context, b *bench, path, prefix string) (decideFunc, error) {
		opts := []slidelimit.Option{slidelimit.WithPrefix(prefix), slidelimit.WithTimeout(10 * time.Second)}
		if !cache {
			opts = append(opts, slidelimit.WithDenyCache(0))
		}
		limit := slidelimit.PerMinute(quota(path))
		if path == "denied" {
			limit = slidelimit.PerHour(deniedQuota)
		}
		lim, err := slidelimit.New(b.rdb, limit, opts...)
		if err != nil {
			return nil, err
		}
		if path == "denied" {
			return func(ctx context.Context, _ *rand.Rand) (bool, error) {
				res, err := lim.Allow(ctx, "x")
				return res.Allowed, err
			}, nil
		}
		return func(ctx context.Context, r *rand.Rand) (bool, error) {
			res, err := lim.Allow(ctx, identity(r))
			return res.Allowed, err
		}, nil
	}
}

// setupSlidelimitPlain is slidelimit through a client of go-redis's
// default options.
func setupSlidelimitPlain(ctx context.Context, b *bench, path, prefix string) (decideFunc, error) {
	lim, err := slidelimit.New(b.plain, slidelimit.PerMinute(quota(path)), slidelimit.WithPrefix(prefix), slidelimit.WithTimeout(10*time.Second))
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, r *rand.Rand) (bool, error) {
		res, err := lim.Allow(ctx, identity(r))
		return res.Allowed, err
	}, nil
}

func setupRedisRate(ctx context.Context, b *bench, path, prefix string) (decideFunc, error) {
	lim := redis_rate.NewLimiter(b.rdb)
	limit := redis_rate.Limit{Rate: quota(path), Burst: quota(path), Period: time.Minute}
	if path == "denied" {
		limit = redis_rate.PerHour(deniedQuota)
		return func(ctx context.Context, _ *rand.Rand) (bool, error) {
			res, err := lim.Allow(ctx, prefix+"x", limit)
			return err == nil && res.Allowed > 0, err
		}, nil
	}
	return func(ctx context.Context, r *rand.Rand) (bool, error) {
		res, err := lim.Allow(ctx, prefix+identity(r), limit)
		return err == nil && res.Allowed > 0, err
	}, nil
}

func setupUlule(ctx context.Context, b *bench, path, prefix string) (decideFunc, error) {
	store, err := ulredis.NewStoreWithOptions(b.rdb, limiter.StoreOptions{Prefix: strings.TrimSuffix(prefix, ":")})
	if err != nil {
		return nil, err
	}
	rate := limiter.Rate{Period: time.Minute, Limit: int64(quota(path))}
	if path == "denied" {
		rate = limiter.Rate{Period: time.Hour, Limit: deniedQuota}
	}
	lim := limiter.New(store, rate)
	if path == "denied" {
		return func(ctx context.Context, _ *rand.Rand) (bool, error) {
			res, err := lim.Get(ctx, "x")
			return err == nil && !res.Reached, err
		}, nil
	}
	return func(ctx context.Context, r *rand.Rand) (bool, error) {
		res, err := lim.Get(ctx, identity(r))
		return err == nil && !res.Reached, err
	}, nil
}

func setupClassic(ctx context.Context, b *bench, path, prefix string) (decideFunc, error) {
	limit, window := int64(quota(path)), int64(time.Minute/time.Millisecond)
	if path == "denied" {
		limit, window = deniedQuota, int64(time.Hour/time.Millisecond)
	}
	decide := func(ctx context.Context, id string) (bool, error) {
		now := time.Now().UnixMilli()
		member := strconv.FormatInt(now, 10) + "-" + uuid.NewString()
		v, err := classicScript.Run(ctx, b.rdb, []string{prefix + "{" + id + "}"}, now, window, limit, member).Int64Slice()
		if err != nil {
			return false, err
		}
		return len(v) == 2 && v[0] == 1, nil
	}
	if path == "denied" {
		return func(ctx context.Context, _ *rand.Rand) (bool, error) { return decide(ctx, "x") }, nil
	}
	return func(ctx context.Context, r *rand.Rand) (bool, error) { return decide(ctx, identity(r)) }, nil
}

// runGo times one cell of a Go contender.
func (b *bench) runGo(ctx context.Context, ct contender, path string, callers int) error {
	decide, err := ct.setup(ctx, b, path, b.prefix(ct.name))
	if err != nil {
		return fmt.Errorf("%s: %w", ct.name, err)
	}
	want := admitting(path)
	// Warm up: load scripts, open connections and, on the denied path,
	// exhaust the identity.
	r := rand.New(rand.NewPCG(1, 2))
	for range deniedQuota + 2 {
		if _, err := decide(ctx, r); err != nil {
			return fmt.Errorf("%s warm-up: %w", ct.name, err)
		}
	}
	var wg sync.WaitGroup
	var stop atomic.Bool
	var mismatch atomic.Int64
	var firstErr atomic.Value
	lat := make([][]time.Duration, callers)
	cpu0, scripts0 := b.cpu(ctx), b.scriptCalls(ctx)
	start := time.Now()
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 7))
			ls := make([]time.Duration, 0, 4096)
			for !stop.Load() {
				t0 := time.Now()
				ok, err := decide(ctx, r)
				ls = append(ls, time.Since(t0))
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					mismatch.Add(1)
				} else if ok != want {
					mismatch.Add(1)
				}
			}
			lat[g] = ls
		}()
	}
	time.Sleep(b.cell)
	stop.Store(true)
	wg.Wait()
	elapsed := time.Since(start)
	cpu1, scripts1 := b.cpu(ctx), b.scriptCalls(ctx)
	all := slices.Concat(lat...)
	if n := mismatch.Load(); n > 0 {
		return fmt.Errorf("%s, %s path, %d callers: %d of %d calls were not %s (first error: %v)",
			ct.name, path, callers, n, len(all), map[bool]string{true: "admitted", false: "denied"}[want], firstErr.Load())
	}
	c := measured(all, elapsed, cpu1-cpu0)
	if n := scripts1 - scripts0; n > 0 && scripts0 >= 0 {
		c.perScript = float64(c.decisions) / float64(n)
	}
	b.add(cellKey{path, callers, ct.name}, c)
	return nil
}

// measured turns latencies into a cell.
func measured(lat []time.Duration, elapsed time.Duration, cpuSeconds float64) cell {
	slices.Sort(lat)
	n := int64(len(lat))
	c := cell{decisions: n, rate: float64(n) / elapsed.Seconds()}
	if n > 0 {
		c.p50 = lat[n/2]
		c.p99 = lat[min(n-1, n*99/100)]
		c.cpuPerCall = cpuSeconds * 1e6 / float64(n)
	}
	return c
}

// runCeiling runs redis-benchmark with the allow script by EVALSHA on the allowed
// path, pipelining p commands per client.
func (b *bench) runCeiling(ctx context.Context, clients, p int) error {
	name := "ceiling"
	if p > 1 {
		name = "ceiling-P" + strconv.Itoa(p)
	}
	prefix := b.prefix(name)
	// redis-benchmark needs a count, not a duration: ask for about one
	// cell's worth at the rate this level ran before (or a first guess).
	n := int64(30000 * p / 4)
	if prev := b.results[cellKey{"allowed", clients, name}]; len(prev) > 0 {
		n = int64(prev[len(prev)-1].rate * b.cell.Seconds())
	}
	n = max(n, 5000)
	args := []string{"-h", b.host, "-p", b.port, "-c", strconv.Itoa(clients), "-n", strconv.FormatInt(n, 10),
		"-r", strconv.Itoa(identities), "-P", strconv.Itoa(p), "--csv",
		// ARGV as in decide.lua's header: cost 1, a request id, "" for
		// Redis TIME, then one exact part (step 0) of one limit: the quota
		// and the window in microseconds.
		"EVALSHA", b.sha, "1", prefix + "{__rand_int__}:q", "1", "__rand_int__-__rand_int__-__rand_int__", "",
		"0", "1", strconv.Itoa(quota("allowed")), strconv.FormatInt(time.Minute.Microseconds(), 10)}
	cpu0, scripts0 := b.cpu(ctx), b.scriptCalls(ctx)
	start := time.Now()
	out, err := exec.CommandContext(ctx, "redis-benchmark", args...).Output()
	elapsed := time.Since(start)
	cpu1, scripts1 := b.cpu(ctx), b.scriptCalls(ctx)
	if err != nil {
		return fmt.Errorf("redis-benchmark: %w", err)
	}
	recs, err := csv.NewReader(strings.NewReader(string(out))).ReadAll()
	if err != nil {
		return fmt.Errorf("redis-benchmark output %q: %w", out, err)
	}
	var c cell
	for _, rec := range recs {
		if len(rec) >= 7 && strings.HasPrefix(rec[0], "EVALSHA") {
			c.rate, _ = strconv.ParseFloat(rec[1], 64)
			p50, _ := strconv.ParseFloat(rec[4], 64)
			p99, _ := strconv.ParseFloat(rec[6], 64)
			c.p50 = time.Duration(p50 * float64(time.Millisecond))
			c.p99 = time.Duration(p99 * float64(time.Millisecond))
		}
	}
	if c.rate == 0 {
		return fmt.Errorf("redis-benchmark printed no EVALSHA rate: %q", out)
	}
	c.decisions = n
	c.cpuPerCall = (cpu1 - cpu0) * 1e6 / float64(n)
	if calls := scripts1 - scripts0; calls > 0 && scripts0 >= 0 {
		c.perScript = float64(n) / float64(calls)
	}
	_ = elapsed
	b.add(cellKey{"allowed", clients, name}, c)
	return nil
}

func (b *bench) add(k cellKey, c cell) {
	b.resultMu.Lock()
	defer b.resultMu.Unlock()
	b.results[k] = append(b.results[k], c)
}

// ran reports whether any cell of path was measured.
func (b *bench) ran(path string) bool {
	for k := range b.results {
		if k.path == path {
			return true
		}
	}
	return false
}

// median returns the cell of median rate of k, and its p50, p99 and CPU
// each as the median of the repetitions.
func (b *bench) median(k cellKey) (cell, bool) {
	cs := b.results[k]
	if len(cs) == 0 {
		return cell{}, false
	}
	med := func(f func(cell) float64) float64 {
		v := make([]float64, len(cs))
		for i, c := range cs {
			v[i] = f(c)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	return cell{
		rate:       med(func(c cell) float64 { return c.rate }),
		p50:        time.Duration(med(func(c cell) float64 { return float64(c.p50) })),
		p99:        time.Duration(med(func(c cell) float64 { return float64(c.p99) })),
		cpuPerCall: med(func(c cell) float64 { return c.cpuPerCall }),
		perScript:  med(func(c cell) float64 { return c.perScript }),
	}, true
}

// ratios returns, for each repetition that measured both, the decisions/s
// of cell mine divided by those of cell peer, sorted. A repetition runs the
// contenders of one path and level back to back, so each ratio compares
// two cells seconds apart, and a host whose speed drifts over minutes moves
// both alike.
func (b *bench) ratios(mine, peer cellKey) []float64 {
	ms, ps := b.results[mine], b.results[peer]
	var r []float64
	for i := range min(len(ms), len(ps)) {
		if ps[i].rate > 0 {
			r = append(r, ms[i].rate/ps[i].rate)
		}
	}
	slices.Sort(r)
	return r
}

// cpu returns Redis's used CPU seconds, user plus system.
func (b *bench) cpu(ctx context.Context) float64 {
	info, err := b.rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return 0
	}
	u, _ := strconv.ParseFloat(infoField(info, "used_cpu_user"), 64)
	s, _ := strconv.ParseFloat(infoField(info, "used_cpu_sys"), 64)
	return u + s
}

// scriptCalls returns how many EVALSHA and EVAL commands Redis has run
// (INFO commandstats), or -1 if it cannot tell.
func (b *bench) scriptCalls(ctx context.Context) int64 {
	info, err := b.rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return -1
	}
	var n int64
	for _, name := range []string{"cmdstat_evalsha", "cmdstat_eval"} {
		// calls=N,usec=...
		v, _, _ := strings.Cut(strings.TrimPrefix(infoField(info, name), "calls="), ",")
		c, _ := strconv.ParseInt(v, 10, 64)
		n += c
	}
	return n
}

func infoField(info, name string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// report prints the throughput, latency, CPU and ratio tables.
func (b *bench) report() {
	peers := []string{"redis_rate", "ulule", "classic"}
	for _, path := range []string{"allowed", "stepped", "denied"} {
		if !b.ran(path) {
			continue
		}
		names := []string{"slidelimit", "redis_rate", "ulule", "classic"}
		switch path {
		case "stepped": // no ceiling: redis-benchmark runs the exact log
		case "denied":
			names = []string{"slidelimit", "slidelimit-nocache", "redis_rate", "ulule", "classic"}
		default:
			names = append([]string{"slidelimit", "slidelimit-plain"}, append(names[1:], "ceiling", "ceiling-P16")...)
		}
		fmt.Printf("\n== %s path: decisions/s, p50 / p99 latency, Redis CPU µs per decision, decisions a script call (median of %d)\n", path, b.reps)
		fmt.Printf("%-19s", "callers")
		for _, c := range b.levels {
			fmt.Printf(" | %-43s", fmt.Sprintf("c=%d", c))
		}
		fmt.Println()
		for _, name := range names {
			fmt.Printf("%-19s", name)
			for _, c := range b.levels {
				m, ok := b.median(cellKey{path, c, name})
				if !ok {
					fmt.Printf(" | %-43s", "-")
					continue
				}
				per := "     -"
				if m.perScript > 0 {
					per = fmt.Sprintf("%6.1f", m.perScript)
				}
				fmt.Printf(" | %-43s", fmt.Sprintf("%8.0f/s %6s %7s %5.1fµs %s", m.rate, short(m.p50), short(m.p99), m.cpuPerCall, per))
			}
			fmt.Println()
		}
		mine := []string{"slidelimit"}
		if path == "allowed" {
			mine = append(mine, "slidelimit-plain")
		}
		for _, me := range mine {
			fmt.Printf("\n== %s path: ratio of %s's decisions/s to each (above 1: %s is faster); the median of\n", path, me, me)
			fmt.Printf("the repetitions' ratios, each of two cells run back to back, and their range\n")
			fmt.Printf("%-19s", "callers")
			for _, c := range b.levels {
				fmt.Printf(" %10s", fmt.Sprintf("c=%d", c))
			}
			fmt.Println()
			others := append(slices.Clone(peers), "ceiling", "ceiling-P16")
			switch path {
			case "stepped":
				others = peers
			case "denied":
				others = append([]string{"slidelimit-nocache"}, peers...)
			}
			for _, name := range others {
				rs := make([][]float64, len(b.levels))
				measured := false
				fmt.Printf("%-19s", "÷ "+name)
				for i, c := range b.levels {
					rs[i] = b.ratios(cellKey{path, c, me}, cellKey{path, c, name})
					if len(rs[i]) == 0 {
						fmt.Printf(" %10s", "-")
						continue
					}
					measured = true
					fmt.Printf(" %10.2f", rs[i][len(rs[i])/2])
				}
				fmt.Println()
				if b.reps < 3 || !measured {
					continue
				}
				fmt.Printf("%-19s", "  range")
				for _, r := range rs {
					if len(r) == 0 {
						fmt.Printf(" %10s", "-")
						continue
					}
					fmt.Printf(" %10s", fmt.Sprintf("%.2f–%.2f", r[0], r[len(r)-1]))
				}
				fmt.Println()
			}
		}
		if admitting(path) {
			fmt.Printf("%-19s", "CPU classic÷ours")
			for _, c := range b.levels {
				s, _ := b.median(cellKey{path, c, "slidelimit"})
				o, _ := b.median(cellKey{path, c, "classic"})
				if s.cpuPerCall == 0 {
					fmt.Printf(" %10s", "-")
					continue
				}
				fmt.Printf(" %10.2f", o.cpuPerCall/s.cpuPerCall)
			}
			fmt.Println("   (Redis CPU per decision; above 1: slidelimit costs Redis less)")
		}
	}
}

func short(d time.Duration) string {
	switch {
	case d < time.Microsecond:
		return fmt.Sprintf("%dns", d.Nanoseconds())
	case d < time.Millisecond:
		return fmt.Sprintf("%.0fµs", float64(d)/float64(time.Microsecond))
	default:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	}
}

func envString(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func envDuration(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func envInts(name string, def []int) []int {
	var v []int
	for f := range strings.FieldsSeq(strings.ReplaceAll(os.Getenv(name), ",", " ")) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return def
		}
		v = append(v, n)
	}
	if len(v) == 0 {
		return def
	}
	return v
}

func envStrings(name string, def []string) []string {
	if v := strings.Fields(strings.ReplaceAll(os.Getenv(name), ",", " ")); len(v) > 0 {
		return v
	}
	return def
}

// allowSource returns the allow script for plans of exact limits, as
// core/internal/script assembles it from its files, or the file at path if
// one is given.
func allowSource(path string) (string, error) {
	if path != "" {
		src, err := os.ReadFile(path)
		return string(src), err
	}
	var src strings.Builder
	for _, f := range []string{"prelude", "exact", "decide"} {
		part, err := os.ReadFile("../core/internal/script/" + f + ".lua")
		if err != nil {
			return "", err
		}
		src.Write(part)
	}
	return src.String(), nil
}
