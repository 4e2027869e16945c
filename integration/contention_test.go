package integration

import (
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/core/redistest"
)

// Shape of the fleet in TestExactnessAcrossProcesses.
const (
	fleetProcesses = 4
	fleetGoroutine = 32 // per process
	fleetCalls     = 8  // per goroutine: 1,024 calls in all
)

// TestExactnessAcrossProcesses proves the central claim: a limit holds
// exactly across a fleet. Four OS processes of 32 goroutines each, released
// at once, hammer one identity; every window is long enough that nothing
// slides during the test, so the admitted total must be exactly what the
// tightest limit allows, and the sorted set of every limit must hold exactly
// the admitted units. No call may fail: an error would be a fail-open admit
// that Redis never decided.
func TestExactnessAcrossProcesses(t *testing.T) {
	perMinute50 := limitSpec{Quota: 50, Window: time.Minute}
	tests := []struct {
		name   string
		limits []limitSpec
		costs  []int
		// wantUnits is the exact number of units admitted; 0 means it
		// depends on the order of the calls, and only the invariants
		// below are checked.
		wantUnits int
	}{
		{name: "allow", limits: []limitSpec{perMinute50}, costs: []int{1}, wantUnits: 50},
		{name: "allowN cost 3", limits: []limitSpec{perMinute50}, costs: []int{3}, wantUnits: 48},
		{name: "allowN costs 1 to 5", limits: []limitSpec{perMinute50}, costs: []int{1, 2, 3, 4, 5}},
		{
			name:      "multi-limit",
			limits:    []limitSpec{perMinute50, {Quota: 20, Window: 30 * time.Second}},
			costs:     []int{1},
			wantUnits: 20,
		},
	}
	for _, be := range backends() {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			rdb := be.client(t)
			tg := targetOf(t, rdb)
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					t.Parallel()
					prefix := redistest.Prefix(t)
					cfg := helperConfig{
						Target:     tg,
						Prefix:     prefix,
						Identity:   "tenant:{contended}",
						Limits:     tt.limits,
						Costs:      tt.costs,
						Goroutines: fleetGoroutine,
						Calls:      fleetCalls,
					}
					reps := raceHelpers(t, startHelpers(t, fleetProcesses, cfg))

					var total helperReport
					for i, r := range reps {
						if r.Errors > 0 {
							t.Errorf("helper %d: %d calls failed, first: %s", i, r.Errors, r.FirstErr)
						}
						total.Allowed += r.Allowed
						total.Units += r.Units
						total.Denied += r.Denied
						total.Errors += r.Errors
						if r.MinDenied > 0 && (total.MinDenied == 0 || r.MinDenied < total.MinDenied) {
							total.MinDenied = r.MinDenied
						}
					}
					calls := fleetProcesses * fleetGoroutine * fleetCalls
					if got := total.Allowed + total.Denied + total.Errors; got != calls {
						t.Errorf("helpers decided %d calls, want %d", got, calls)
					}
					quota := tt.limits[0].Quota
					for _, l := range tt.limits {
						quota = min(quota, l.Quota)
					}
					if tt.wantUnits > 0 && total.Units != tt.wantUnits {
						t.Errorf("AllowN(%q) admitted %d units in %d calls across %d processes, want %d",
							cfg.Identity, total.Units, total.Allowed, fleetProcesses, tt.wantUnits)
					}
					// Exact for any mix of costs: never more than the quota,
					// and no denied request would have fitted at the end
					// (the count only grows, so it did not fit when denied).
					if total.Units > quota {
						t.Errorf("admitted %d units, more than the quota %d", total.Units, quota)
					}
					if total.MinDenied > 0 && total.Units+total.MinDenied <= quota {
						t.Errorf("admitted %d units of %d and denied a request of cost %d that fits",
							total.Units, quota, total.MinDenied)
					}
					for _, l := range tt.limits {
						if got := zcard(t, rdb, prefix, cfg.Identity, l.limit()); got != int64(total.Units) {
							t.Errorf("ZCARD of the %v set = %d, want %d (the admitted units)", l.limit(), got, total.Units)
						}
					}
					t.Logf("%d processes × %d goroutines × %d calls: %d admitted (%d units), %d denied",
						fleetProcesses, fleetGoroutine, fleetCalls, total.Allowed, total.Units, total.Denied)
				})
			}
		})
	}
}
