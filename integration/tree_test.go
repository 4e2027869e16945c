package integration

import (
	"fmt"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/core/redistest"
)

// TestTreeAcrossProcesses: four OS processes, one per API key of one
// organisation's two teams, race 128 calls each through AllowTree on the
// organisation, the key's team and the key, whose limits bind at every
// level: each key 12 a minute, team a 20 (its two keys want 24), team b 40,
// the organisation 40 (its teams could take 44). Each level's log then
// holds exactly the units the processes under it were admitted, none over
// its quota, the organisation exactly its 40: a denial at one level took
// nothing at another. Standalone and Cluster, beside two busy loops.
func TestTreeAcrossProcesses(t *testing.T) {
	busyLoops(t, 2, 2*time.Minute)
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			rdb := b.client(t)
			prefix := redistest.Prefix(t)
			const tenant = "org:acme"
			// Equal limits on two levels must differ by name; a
			// limitSpec has no name, so each level's window differs by
			// a millisecond instead.
			perMinute := func(n int, level time.Duration) []limitSpec {
				return []limitSpec{{Quota: n, Window: time.Minute + level}}
			}
			teams := []string{"team:a", "team:a", "team:b", "team:b"}
			teamQuota := map[string]int{"team:a": 20, "team:b": 40}
			const keyQuota, orgQuota = 12, 40
			var hs []*helper
			for i, team := range teams {
				cfg := helperConfig{
					Target:     targetOf(t, rdb),
					Prefix:     prefix,
					Identity:   tenant,
					Limits:     perMinute(1000, 0),
					Costs:      []int{1},
					Goroutines: 16,
					Calls:      8,
					Tree: []levelSpec{
						{Limits: perMinute(orgQuota, 0)},
						{Identity: team, Limits: perMinute(teamQuota[team], time.Millisecond)},
						{Identity: fmt.Sprintf("key:%d", i), Limits: perMinute(keyQuota, 2*time.Millisecond)},
					},
				}
				hs = append(hs, spawnHelpers(t, 1, "TestHelperProcess", envHelper, cfg, 45*time.Second)...)
			}
			reps := raceHelpers(t, hs)

			count := func(level string) int {
				key := prefix + "{" + tenant + "}" // as Key documents for a tree's levels
				if level != "" {
					key += "/" + level
				}
				key += ":#0" // its exact log
				n, err := rdb.ZCount(t.Context(), key, "0", "+inf").Result()
				if err != nil {
					t.Fatalf("ZCOUNT %s: %v", key, err)
				}
				return int(n)
			}
			admitted, byTeam, denied := 0, map[string]int{}, 0
			for i, r := range reps {
				if r.Errors > 0 {
					t.Fatalf("helper %d: %d errors, the first %s", i, r.Errors, r.FirstErr)
				}
				admitted += r.Units
				byTeam[teams[i]] += r.Units
				denied += r.Denied
				if got := count(fmt.Sprintf("key:%d", i)); got != r.Units || got > keyQuota {
					t.Errorf("key:%d holds %d units, its process was admitted %d; want equal, at most %d", i, got, r.Units, keyQuota)
				}
			}
			for team, q := range teamQuota {
				if got := count(team); got != byTeam[team] || got > q {
					t.Errorf("%s holds %d units, its keys were admitted %d; want equal, at most %d", team, got, byTeam[team], q)
				}
			}
			if got := count(""); got != admitted || admitted != orgQuota {
				t.Errorf("the organisation holds %d units, the processes were admitted %d; want both exactly %d", got, admitted, orgQuota)
			}
			t.Logf("512 calls: %d admitted (team a %d, team b %d), %d denied", admitted, byTeam["team:a"], byTeam["team:b"], denied)
		})
	}
}
