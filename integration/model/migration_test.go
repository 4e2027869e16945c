package model

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	slidelimit "github.com/slidelimit/slidelimit/core"
)

// TestLiveMigrationUnderTraffic is issue 29's resharding case, counted: two
// identities (one under an exact and a stepped limit, one under a stepped
// limit only) are called by eight goroutines each while their slots move
// to another primary key by key, 150 ms between keys, strings first or
// sorted sets first, BUSYKEY retried with REPLACE, under FailOpen and
// FailClosed. Half of each quota is used before the migration; the calls
// during it ask for three times what is left.
//
// What must hold, in each of the four runs:
//   - no identity is admitted by Redis beyond its quota, and the quota is
//     used whole: the logs count it, each admission once (a call that fell
//     back after its timeout may have been decided all the same);
//   - no partial write: an admission is in both logs of its call or in
//     neither;
//   - a limiter whose timeout outlasts the migration never falls back, and
//     one of 30 ms falls back only while the migration runs.
func TestLiveMigrationUnderTraffic(t *testing.T) {
	e := newClusterEnv(t, "migration", 0)
	for _, stringsFirst := range []bool{true, false} {
		for _, policy := range []slidelimit.FailurePolicy{slidelimit.FailOpen, slidelimit.FailClosed} {
			name := fmt.Sprintf("%s/strings-first=%v", policyName(policy), stringsFirst)
			t.Run(name, func(t *testing.T) { migrateUnderTraffic(t, e, stringsFirst, policy) })
		}
	}
}

// migrationTenant is one identity of TestLiveMigrationUnderTraffic.
type migrationTenant struct {
	who    string
	limits []slidelimit.Limit
	quota  int // the smallest quota of limits, all of whose windows outlast the test

	mu                sync.Mutex
	admitted, refused int
	fellBack, fbLong  int             // fallbacks: all of them, and those of the long-timeout limiter
	fallbackOutside   []time.Duration // calls begun after the migrations ended that fell back
	unexpected        []error
}

func migrateUnderTraffic(t *testing.T, e *env, stringsFirst bool, policy slidelimit.FailurePolicy) {
	prefix := newPrefix("mig")
	tenants := []*migrationTenant{
		{who: "both", limits: []slidelimit.Limit{slidelimit.PerMinute(60), slidelimit.PerHour(300).Stepped(time.Minute)}, quota: 60},
		{who: "stepped", limits: []slidelimit.Limit{slidelimit.PerHour(60).Stepped(time.Minute)}, quota: 60},
	}
	newLim := func(tn *migrationTenant, timeout time.Duration) *slidelimit.Limiter {
		lim, err := slidelimit.New(e.clients[0], tn.limits[0], slidelimit.WithPrefix(prefix), slidelimit.WithTimeout(timeout),
			slidelimit.WithFailurePolicy(policy), slidelimit.WithDenyCache(0))
		if err != nil {
			t.Fatal(err)
		}
		return lim
	}
	ctx := t.Context()
	type pair struct{ long, short *slidelimit.Limiter }
	lims := map[*migrationTenant]pair{}
	for _, tn := range tenants {
		lims[tn] = pair{newLim(tn, 5*time.Second), newLim(tn, 30*time.Millisecond)}
		for i := range tn.quota / 2 {
			if res, err := lims[tn].long.AllowLimits(ctx, tn.who, 1, tn.limits...); err != nil || !res.Allowed {
				t.Fatalf("%s: call %d before the migration = %+v, %v", tn.who, i, res, err)
			}
			tn.admitted++
		}
	}

	var migs []*migration
	start := time.Now()
	for _, tn := range tenants {
		key, _ := slidelimit.Key(prefix, tn.who, tn.limits[0])
		migs = append(migs, e.migrate(key, stringsFirst, 150*time.Millisecond))
	}
	var wg sync.WaitGroup
	var ended time.Time // when both migrations had ended, set once
	var endOnce sync.Once
	migrated := func() (bool, time.Time) {
		if !migs[0].done() || !migs[1].done() {
			return false, time.Time{}
		}
		endOnce.Do(func() { ended = time.Now() })
		return true, ended
	}
	for _, tn := range tenants {
		for g := range 8 {
			lim, long := lims[tn].long, true
			if g%2 == 1 {
				lim, long = lims[tn].short, false
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Through the whole migration, and a few calls after it.
				for after := 0; after < 3; {
					a := time.Now()
					res, err := lim.AllowLimits(ctx, tn.who, 1, tn.limits...)
					done, end := migrated()
					tn.mu.Lock()
					switch {
					case res.Fallback:
						tn.fellBack++
						if long {
							tn.fbLong++
						}
						if done && a.After(end.Add(200*time.Millisecond)) {
							tn.fallbackOutside = append(tn.fallbackOutside, a.Sub(start))
						}
					case err != nil:
						tn.unexpected = append(tn.unexpected, err)
					case res.Allowed:
						tn.admitted++
					default:
						tn.refused++
					}
					tn.mu.Unlock()
					if done {
						after++
					}
					time.Sleep(10 * time.Millisecond)
				}
			}()
		}
	}
	wg.Wait()
	for _, m := range migs {
		if err := m.wait(); err != nil {
			t.Fatalf("migration: %v", err)
		}
		if !strings.Contains(strings.Join(m.log, "\n"), "moved") {
			t.Fatalf("the migration moved no key: %v", m.log)
		}
	}
	took := time.Since(start)

	for _, tn := range tenants {
		stem := stemKey(prefix, tn.who)
		exact, stepped := -1, -1
		if n, err := e.clients[0].ZCount(context.Background(), stem+":#0", "0", "+inf").Result(); err == nil && n > 0 {
			exact = int(n)
		}
		step := strconv.FormatInt(time.Minute.Microseconds(), 10)
		if h, err := e.clients[0].GetRange(context.Background(), stem+":#"+step, 0, 47).Result(); err == nil && len(h) == 48 {
			stepped = int(math.Float64frombits(binary.LittleEndian.Uint64([]byte(h[16:24]))))
		}
		t.Logf("%s (%v): %d admitted of a quota of %d, %d refused, %d fell back (%d with the 5 s timeout); exact log %d units, stepped log %d; migration %v",
			tn.who, tn.limits, tn.admitted, tn.quota, tn.refused, tn.fellBack, tn.fbLong, exact, stepped, took.Round(time.Millisecond))
		if len(tn.unexpected) > 0 {
			t.Errorf("%s: %d calls failed without falling back, the first: %v", tn.who, len(tn.unexpected), tn.unexpected[0])
		}
		if tn.admitted > tn.quota {
			t.Errorf("%s: Redis admitted %d, over the quota of %d", tn.who, tn.admitted, tn.quota)
		}
		// A call that fell back after its timeout may still have been
		// decided (WithTimeout: the abandoned command finishes): the logs
		// hold the admitted units and at most one unit per fallback more.
		if stepped < tn.admitted || stepped > tn.admitted+tn.fellBack || stepped != tn.quota {
			t.Errorf("%s: the stepped log counts %d units, want the quota of %d, the %d admitted and at most the %d that fell back",
				tn.who, stepped, tn.quota, tn.admitted, tn.fellBack)
		}
		if tn.fbLong > 0 {
			t.Errorf("%s: the limiter of a 5 s timeout fell back %d times during a migration of %v", tn.who, tn.fbLong, took.Round(time.Millisecond))
		}
		if len(tn.fallbackOutside) > 0 {
			t.Errorf("%s: %d fallbacks after the migrations ended (at %v)", tn.who, len(tn.fallbackOutside), tn.fallbackOutside)
		}
		// No partial write: an admission is in every log of its call or in
		// none.
		if slices.ContainsFunc(tn.limits, func(l slidelimit.Limit) bool { return l.Resolution() == 0 }) && exact != stepped {
			t.Errorf("%s: the exact log holds %d units and the stepped log %d: a call wrote some of its logs only", tn.who, exact, stepped)
		}
	}
}
