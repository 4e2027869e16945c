package slidelimit

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/core/redistest"
)

// TestOneAnswersAsDecide holds allow.lua's short paths for the commonest
// request (one unit, one exact limit: the block at the top of the script,
// and "one") to the general one (decide). Two logs get the same random
// requests, on a caller's clock so that both see the same times: one log's
// through the short paths, the other's padded with an ending quota of 0,
// which only decide takes. Both replies and both logs, with their expiry
// times, must stay alike, alone and in the batch form. The requests mix
// two windows on one log (so a retention record makes the shorter window
// count with ZCOUNT), retried ids, denials, and clocks that stand still or
// fall behind the last one.
func TestOneAnswersAsDecide(t *testing.T) {
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 40 {
		logs := [2]string{
			fmt.Sprintf("%s{one%d}", prefix, round),
			fmt.Sprintf("%s{decide%d}", prefix, round),
		}
		now := int64(1_700_000_000_000_000) + rng.Int64N(1_000_000)
		quota := 1 + rng.IntN(6)
		// Windows of 10 s and more, so that no key expires (by Redis's own
		// clock) while a round runs, and times in whole seconds, so that
		// members often stand right on a window's edge.
		windows := []int64{(10 + rng.Int64N(50)) * 1_000_000, (100 + rng.Int64N(500)) * 1_000_000}
		var ids []string
		batch := round%2 == 1
		for i := range 60 {
			switch rng.IntN(6) {
			case 0: // another server's clock, behind the last one
				now -= rng.Int64N(5) * 1_000_000
			case 1, 2: // a clock that stands still
			default:
				now += rng.Int64N(40) * 1_000_000
			}
			id := "r" + strconv.Itoa(i)
			if len(ids) > 0 && rng.IntN(5) == 0 {
				id = ids[rng.IntN(len(ids))] // a retried call
			} else {
				ids = append(ids, id)
			}
			window := windows[rng.IntN(2)]
			clock := strconv.FormatInt(now, 10)
			var got [2]any
			for j, log := range logs {
				args := []any{1, id, clock, quota, window}
				keys := []string{log}
				if j == 1 {
					args = append(args, 0, 0)
					keys = append(keys, log)
				}
				if batch {
					args = append([]any{"*", len(keys)}, args...)
				}
				reply, err := allowScript.Run(t.Context(), rdb, keys, args...).Slice()
				if err != nil {
					t.Fatalf("round %d, request %d on %s: %v", round, i, log, err)
				}
				if batch {
					got[j] = reply[0]
				} else {
					got[j] = reply
				}
			}
			if !reflect.DeepEqual(got[0], got[1]) {
				t.Fatalf("round %d (batch %v), request %d (id %s, quota %d, window %d µs, now %d): short path %v, decide %v",
					round, batch, i, id, quota, window, now, got[0], got[1])
			}
			for _, suffix := range []string{"", ":#keep"} {
				a, errA := rdb.Dump(t.Context(), logs[0]+suffix).Result()
				b, errB := rdb.Dump(t.Context(), logs[1]+suffix).Result()
				if a != b || (errA == nil) != (errB == nil) {
					t.Fatalf("round %d, request %d: the logs %q differ after the same requests", round, i, suffix)
				}
				// Both expire alike: the times were set from the same
				// clock, and are read moments apart.
				ttlA := rdb.PTTL(t.Context(), logs[0]+suffix).Val()
				ttlB := rdb.PTTL(t.Context(), logs[1]+suffix).Val()
				if d := ttlA - ttlB; (ttlA < 0) != (ttlB < 0) || d < -time.Second || d > time.Second {
					t.Fatalf("round %d, request %d: the logs %q expire in %v and %v after the same requests", round, i, suffix, ttlA, ttlB)
				}
			}
		}
	}
}
