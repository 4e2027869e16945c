// Command decisioncost counts what the limiter's decisions cost Redis in
// instructions, the one measure that a noisy two-core machine repeats
// exactly: scripts/decision-cost.sh runs it beside a redis-server under
// valgrind's callgrind.
//
//	decisioncost SOCKET PID KIND CALLERS
//
// It connects to the Redis at unix socket SOCKET, whose server process is
// PID, and makes decisions of one limit of KIND ("exact": 1,000 per minute,
// "stepped": 1,000,000 per minute, counted in steps; "aged": the stepped
// limit on a caller's clock (WithClock) that the fill moves through one
// window and then moves 1.5 steps between two admissions of an identity,
// so that every admission first evicts the bucket or two that left the
// window, as a stepped log's admissions do once the log is older than its
// window and they come more than a step apart; its logs expire on Redis's
// clock, which a window of a minute outlasts under valgrind); "dense": the
// stepped limit on a caller's clock that moves a quarter of a step between
// two admissions of an identity, so that three admissions in four go to
// the newest bucket, as a busy identity's do) through the limiter, with its
// own request ids, for 100 identities in turn, on CALLERS
// goroutines (a lone caller sends each decision alone; more share round
// trips as the limiter batches them). It makes 200 decisions an identity
// to fill the logs (a stepped log keeps 128 ids), zeroes callgrind's
// counters (callgrind_control -z), makes 4,000 more, dumps the counters
// (callgrind_control -d) and prints the decisions and the EVALSHA calls
// they took. Every decision must be admitted.
package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
)

const (
	identities = 100
	fill       = 200 * identities
	measured   = 4000
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "decisioncost:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) != 4 {
		return fmt.Errorf("usage: decisioncost SOCKET PID exact|stepped|aged|dense CALLERS")
	}
	sock, pid, kind := args[0], args[1], args[2]
	callers, err := strconv.Atoi(args[3])
	if err != nil || callers < 1 {
		return fmt.Errorf("CALLERS %q: want a positive number", args[3])
	}
	limit := slidelimit.PerMinute(slidelimit.MaxExactQuota)
	switch kind {
	case "exact":
	case "stepped", "aged", "dense":
		limit = slidelimit.PerMinute(steppedQuota)
	default:
		return fmt.Errorf("KIND %q: want exact, stepped, aged or dense", kind)
	}
	rdb := redis.NewClient(&redis.Options{Network: "unix", Addr: sock, ContextTimeoutEnabled: true})
	defer rdb.Close()
	// valgrind slows Redis some fifty times: a generous timeout.
	opts := []slidelimit.Option{slidelimit.WithTimeout(time.Minute), slidelimit.WithPrefix("dc:" + kind)}
	// The aged and dense kinds' clock, in µs, moved by tick before each
	// decision. A stepped limit's default step is its window over 1,440.
	step := limit.Window.Microseconds() / 1440
	var now, tick atomic.Int64
	switch kind {
	case "aged":
		tick.Store(limit.Window.Microseconds() / fill)
	case "dense":
		tick.Store(step / 4 / identities)
	}
	if tick.Load() > 0 {
		now.Store(time.Now().UnixMicro())
		opts = append(opts, slidelimit.WithClock(func() time.Time { return time.UnixMicro(now.Load()) }))
	}
	move := func() { now.Add(tick.Load()) }
	lim, err := slidelimit.New(rdb, limit, opts...)
	if err != nil {
		return err
	}
	ctx := context.Background()
	if err := decide(ctx, lim, callers, fill, move); err != nil {
		return err
	}
	if kind == "aged" {
		tick.Store(step * 3 / 2 / identities)
	}
	calls0, err := evalshaCalls(ctx, rdb)
	if err != nil {
		return err
	}
	if out, err := exec.Command("callgrind_control", "-z", pid).CombinedOutput(); err != nil {
		return fmt.Errorf("callgrind_control -z: %w: %s", err, out)
	}
	if err := decide(ctx, lim, callers, measured, move); err != nil {
		return err
	}
	if out, err := exec.Command("callgrind_control", "-d", "decisions", pid).CombinedOutput(); err != nil {
		return fmt.Errorf("callgrind_control -d: %w: %s", err, out)
	}
	calls1, err := evalshaCalls(ctx, rdb)
	if err != nil {
		return err
	}
	fmt.Printf("decisions %d evalsha %d\n", measured, calls1-calls0)
	return nil
}

// decide makes n decisions on callers goroutines, identity i%identities
// for the i-th, calling before before each.
func decide(ctx context.Context, lim *slidelimit.Limiter, callers, n int, before func()) error {
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < n; i += callers {
				before()
				res, err := lim.Allow(ctx, strconv.Itoa(i%identities))
				if err == nil && !res.Allowed {
					err = fmt.Errorf("decision %d was denied", i)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// evalshaCalls returns how many EVALSHA Redis has run (INFO commandstats).
func evalshaCalls(ctx context.Context, rdb *redis.Client) (int64, error) {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:calls="); ok {
			n, _, _ := strings.Cut(rest, ",")
			return strconv.ParseInt(n, 10, 64)
		}
	}
	return 0, nil
}

// steppedQuota is the stepped kinds' quota, which no run reaches: a
// million, below 2^20, as the stepped path's has always been, so that its
// admissions get the allow script's short reply as every quota of that
// size does (one above 2^20 gets the reply of five values).
const steppedQuota = 1_000_000
