package integration

import (
	"encoding/binary"
	"math"
	"sort"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// TestPerCallLimitsAcrossProcesses hammers one identity from four OS
// processes, two of which pass one plan with every call (AllowLimits) and
// two another, beside two busy loops, for exact and stepped limits. In the
// mixed case the first plan's first limit, stepped, counts both groups'
// units; the plans' first limits are where places are read. All plans count the identity's one
// log, so the fleet's admissions must take the places 1..units of it, each
// once (no two decisions saw the same count), and each group's admissions
// must lie within its own plan's quota: a tight caller never admitted once
// the loose ones had filled its quota.
func TestPerCallLimitsAcrossProcesses(t *testing.T) {
	busyLoops(t, 2, 2*time.Minute)
	tests := []struct {
		name string
		a, b []limitSpec // the plans of the two groups
		// costs of every call; wantUnits is the exact total when the
		// order of the calls cannot change it, else 0
		costs     []int
		wantUnits int
	}{
		{
			name:      "plans differ",
			a:         []limitSpec{{Quota: 20, Window: time.Minute}},
			b:         []limitSpec{{Quota: 50, Window: time.Minute}},
			costs:     []int{1},
			wantUnits: 50,
		},
		{
			name:      "stepped plans",
			a:         []limitSpec{{Quota: 20, Window: time.Minute, Step: time.Second}},
			b:         []limitSpec{{Quota: 50, Window: time.Minute, Step: time.Second}},
			costs:     []int{1},
			wantUnits: 50,
		},
		{
			name:  "stepped and exact in one plan, costs 1 to 3",
			a:     []limitSpec{{Quota: 45, Window: time.Minute, Step: 2 * time.Second}, {Quota: 30, Window: 40 * time.Second}},
			b:     []limitSpec{{Quota: 40, Window: 50 * time.Second, Step: 2 * time.Second}, {Quota: 35, Window: 45 * time.Second}},
			costs: []int{1, 2, 3},
		},
		{
			name:  "default steps above MaxExactQuota, costs 1 to 3",
			a:     []limitSpec{{Quota: 1500, Window: time.Hour}},
			b:     []limitSpec{{Quota: 1200, Window: time.Hour}},
			costs: []int{1, 2, 3},
		},
		{
			name:  "multi-limit plans, costs 1 to 3",
			a:     []limitSpec{{Quota: 60, Window: time.Minute}, {Quota: 30, Window: 40 * time.Second}},
			b:     []limitSpec{{Quota: 40, Window: 50 * time.Second}},
			costs: []int{1, 2, 3},
		},
	}
	for _, be := range backends() {
		t.Run(be.name, func(t *testing.T) {
			rdb := be.client(t)
			tg := targetOf(t, rdb)
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					prefix := redistest.Prefix(t)
					cfg := helperConfig{
						Target: tg, Prefix: prefix, Identity: "tenant:{shared}", Costs: tt.costs,
						Goroutines: fleetGoroutine, Calls: fleetCalls, PerCall: true,
					}
					ca, cb := cfg, cfg
					ca.Limits, cb.Limits = tt.a, tt.b
					hs := append(startHelpers(t, 2, ca), startHelpers(t, 2, cb)...)
					reps := raceHelpers(t, hs)

					quota := func(specs []limitSpec) int {
						q := specs[0].Quota
						for _, s := range specs {
							q = min(q, s.Quota)
						}
						return q
					}
					qa, qb := quota(tt.a), quota(tt.b)
					var positions []int
					units := 0
					for i, r := range reps {
						if r.Errors > 0 {
							t.Errorf("helper %d: %d calls failed, first: %s", i, r.Errors, r.FirstErr)
						}
						q := qa
						if i >= 2 {
							q = qb
						}
						for _, p := range r.Positions {
							if p < 1 || p > q {
								t.Errorf("helper %d (quota %d) admitted a unit at place %d of the log", i, q, p)
							}
						}
						positions = append(positions, r.Positions...)
						units += r.Units
					}
					sort.Ints(positions)
					for i, p := range positions {
						if p != i+1 {
							t.Fatalf("the fleet's units took places %v, want 1..%d each once", positions, units)
						}
					}
					if len(positions) != units {
						t.Errorf("%d places for %d units", len(positions), units)
					}
					if top := max(qa, qb); units > top {
						t.Errorf("admitted %d units, more than the loosest plan's %d", units, top)
					}
					if tt.wantUnits > 0 && units != tt.wantUnits {
						t.Errorf("admitted %d units, want %d", units, tt.wantUnits)
					}
					if got := logged(t, rdb, prefix, cfg.Identity, tt.a[0].limit()); got != int64(units) {
						t.Errorf("%v's log holds %d units, want %d (the admitted units, once each)", tt.a[0].limit(), got, units)
					}
					t.Logf("plans %v and %v: %d units admitted", tt.a, tt.b, units)
				})
			}
		})
	}
}

// logged returns the units limit's log holds for identity: ZCARD of an
// exact limit's log, the total in a stepped one's header (see allow.lua).
func logged(t *testing.T, rdb redis.UniversalClient, prefix, identity string, limit slidelimit.Limit) int64 {
	t.Helper()
	if limit.Resolution() == 0 {
		return zcard(t, rdb, prefix, identity, limit)
	}
	key, err := slidelimit.Key(prefix, identity, limit)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := rdb.GetRange(t.Context(), key, 0, 39).Bytes()
	if err != nil || len(raw) != 40 {
		t.Fatalf("GETRANGE %s 0 39 = %d bytes, %v; want a stepped log's header", key, len(raw), err)
	}
	return int64(math.Float64frombits(binary.LittleEndian.Uint64(raw[16:24]))) // t, after o and n
}
