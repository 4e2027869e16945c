package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
)

// longQuotas are the daily quotas of the long-window section.
var longQuotas = []int{1_000, 10_000, 100_000}

// longReps is how many fresh identities each Redis time is measured on;
// the fastest is printed, the least disturbed by the machine's other work.
const longReps = 5

// longWindows prints, per daily quota, what one identity costs at full
// quota (MEMORY USAGE of all its keys) and the Redis time of single
// decisions, counted exactly and at one-minute steps:
//   - cost 1: an admission with the window one unit short of full;
//   - cost quota: an admission of the whole quota on an empty log;
//   - denied: a request on a full window (a stepped limit reads every step
//     to find when enough leave);
//   - evict: the first call half a day after a full day (a stepped limit
//     drops 720 steps).
//
// Quotas above MaxExactQuota are counted in steps by the limiter; their
// exact figures run the allow script directly with the keys and arguments
// the limiter would send for an exact limit, to show what the exact log
// would cost.
func (b *bench) longWindows(ctx context.Context) error {
	fmt.Printf("\n== long windows: one identity of a daily quota, exact and at one-minute steps (MEMORY USAGE of its keys at full quota; Redis µs of one decision, INFO commandstats, fastest of %d identities)\n", longReps)
	fmt.Printf("%-9s %-8s %12s %10s %12s %10s %10s\n", "quota/day", "mode", "B at full", "cost 1", "cost quota", "denied", "evict")
	src, err := allowSource(b.script)
	if err != nil {
		return err
	}
	script := redis.NewScript(src)
	for _, q := range longQuotas {
		ex, err := b.longExact(ctx, script, q)
		if err != nil {
			return err
		}
		fmt.Printf("%-9d %-8s %12d %10.0f %12.0f %10.0f %10s\n", q, "exact", ex.bytes, ex.cost1, ex.costQ, ex.denied, "-")
		st, err := b.longStepped(ctx, q)
		if err != nil {
			return err
		}
		fmt.Printf("%-9d %-8s %12d %10.0f %12.0f %10.0f %10.0f\n", q, "1m steps", st.bytes, st.cost1, st.costQ, st.denied, st.evict)
	}
	fmt.Println("(exact above 1,000/day, and every exact cost above 250: the allow script run directly, as the limiter counts those in steps)")
	return nil
}

// longFigures are one row of the long-window table.
type longFigures struct {
	bytes                       int64
	cost1, costQ, denied, evict float64 // Redis µs, fastest of longReps
}

// evalshaUsec returns the µs Redis has spent in EVALSHA so far.
func (b *bench) evalshaUsec(ctx context.Context) (float64, error) {
	stats, err := b.rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, err
	}
	for f := range strings.SplitSeq(infoField(stats, "cmdstat_evalsha"), ",") {
		if v, ok := strings.CutPrefix(f, "usec="); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, nil
}

// timed returns the Redis µs of the EVALSHA that do sends, keeping the
// fastest in *best.
func (b *bench) timed(ctx context.Context, best *float64, do func() error) error {
	before, err := b.evalshaUsec(ctx)
	if err != nil {
		return err
	}
	if err := do(); err != nil {
		return err
	}
	after, err := b.evalshaUsec(ctx)
	if err != nil {
		return err
	}
	if d := after - before; *best == 0 || d < *best {
		*best = d
	}
	return nil
}

// longExact measures the exact log of a quota of q per day, through the
// allow script run directly (KEYS: the log; ARGV as the limiter sends).
func (b *bench) longExact(ctx context.Context, script *redis.Script, q int) (longFigures, error) {
	var f longFigures
	window := strconv.FormatInt((24 * time.Hour).Microseconds(), 10)
	eval := func(log string, cost int) (int64, error) {
		id := strconv.FormatUint(rand.Uint64(), 36)
		v, err := script.Run(ctx, b.rdb, []string{log}, cost, id, "", 0, 1, q, window).Result()
		switch r := v.(type) {
		case int64: // the short reply: admitted
			return 1, nil
		case []any:
			if len(r) > 2 {
				if n, ok := r[0].(int64); ok {
					return n, nil
				}
			}
		}
		if err == nil {
			err = fmt.Errorf("unexpected reply %v", v)
		}
		return 0, err
	}
	prefix := b.prefix("longx")
	for i := range longReps {
		log := prefix + "{" + strconv.Itoa(i) + "}"
		if err := b.timed(ctx, &f.costQ, func() error {
			ok, err := eval(log, q)
			if err != nil {
				return fmt.Errorf("long windows: exact cost %d: %w", q, err)
			}
			if ok != 1 {
				return fmt.Errorf("long windows: exact cost %d = %d, want admitted", q, ok)
			}
			return nil
		}); err != nil {
			return f, err
		}
		if err := b.timed(ctx, &f.denied, func() error {
			_, err := eval(log, 1)
			return err
		}); err != nil {
			return f, err
		}
		u, err := b.usage(ctx, log)
		if err != nil {
			return f, err
		}
		f.bytes = max(f.bytes, u)
		short := prefix + "{s" + strconv.Itoa(i) + "}"
		if q > 1 {
			if _, err := eval(short, q-1); err != nil {
				return f, err
			}
		}
		if err := b.timed(ctx, &f.cost1, func() error {
			_, err := eval(short, 1)
			return err
		}); err != nil {
			return f, err
		}
		b.rdb.Del(ctx, log, short)
	}
	return f, nil
}

// longStepped measures a limit of q per day at one-minute steps, through
// the limiter on a clock the bench moves.
func (b *bench) longStepped(ctx context.Context, q int) (longFigures, error) {
	var f longFigures
	const steps = 1440
	limit := slidelimit.PerDay(q).Stepped(time.Minute)
	var now time.Time
	prefix := b.prefix("longs")
	lim, err := slidelimit.New(b.rdb, limit, slidelimit.WithPrefix(prefix), slidelimit.WithTimeout(10*time.Second),
		slidelimit.WithDenyCache(0), slidelimit.WithClock(func() time.Time { return now }))
	if err != nil {
		return f, err
	}
	allow := func(id string, cost int, want bool) error {
		res, err := lim.AllowN(ctx, id, cost)
		if err == nil && res.Allowed != want {
			err = fmt.Errorf("AllowN(%d) = %+v, want allowed %v", cost, res, want)
		}
		if err != nil {
			return fmt.Errorf("long windows: %w", err)
		}
		return nil
	}
	// fill spreads units over every step of a day, ending at the day's
	// last step.
	fill := func(id string, units int) error {
		for i := range steps {
			if cost := units/steps + btoi(i < units%steps); cost > 0 {
				if err := allow(id, cost, true); err != nil {
					return err
				}
			}
			if i < steps-1 {
				now = now.Add(time.Minute)
			}
		}
		return nil
	}
	for i := range longReps {
		now = time.Now().Truncate(time.Minute)
		full, short := "f"+strconv.Itoa(i), "s"+strconv.Itoa(i)
		if err := b.timed(ctx, &f.costQ, func() error { return allow("q"+strconv.Itoa(i), q, true) }); err != nil {
			return f, err
		}
		if err := fill(full, q); err != nil {
			return f, err
		}
		key, _ := slidelimit.Key(prefix, full, limit)
		u1, err := b.usage(ctx, key)
		if err != nil {
			return f, err
		}
		f.bytes = max(f.bytes, u1) // a stepped log holds its request ids
		if err := b.timed(ctx, &f.denied, func() error { return allow(full, 1, false) }); err != nil {
			return f, err
		}
		now = now.Add(-(steps - 1) * time.Minute)
		if err := fill(short, q-1); err != nil {
			return f, err
		}
		if err := b.timed(ctx, &f.cost1, func() error { return allow(short, 1, true) }); err != nil {
			return f, err
		}
		now = now.Add(12 * time.Hour)
		if err := b.timed(ctx, &f.evict, func() error { return allow(full, 1, true) }); err != nil {
			return f, err
		}
	}
	return f, nil
}

func btoi(v bool) int {
	if v {
		return 1
	}
	return 0
}
