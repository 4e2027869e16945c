package redistest

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// ExactLogUnits returns the units the exact log at key holds, as
// slidelimit.Key describes it: a request is its id scored with its
// admission time, of 1 unit unless the log holds its cost as the id and
// "$", scored -3 less the cost; the records are scored -1 and -2. It fails
// t if Redis does.
func ExactLogUnits(t testing.TB, rdb redis.Cmdable, key string) int64 {
	t.Helper()
	members, err := rdb.ZRangeWithScores(t.Context(), key, 0, -1).Result()
	if err != nil {
		t.Fatalf("redistest: ZRANGE %s: %v", key, err)
	}
	costs := map[string]int64{}
	for _, z := range members {
		if m, _ := z.Member.(string); z.Score <= -3 {
			costs[strings.TrimSuffix(m, "$")] = int64(-3 - z.Score)
		}
	}
	var n int64
	for _, z := range members {
		if z.Score < 0 {
			continue
		}
		m, _ := z.Member.(string)
		if c, ok := costs[m]; ok {
			n += c
		} else {
			n++
		}
	}
	return n
}
