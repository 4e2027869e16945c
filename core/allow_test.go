package slidelimit_test

import (
	"testing"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// TestScoresAreRedisTime checks the score allow.lua builds from TIME's two
// strings: every member must carry Redis's time of its admission in µs. About
// one call in ten falls in the first tenth of a second, whose µs need zero
// padding; 300 calls miss that case with a probability below 1e-13.
func TestScoresAreRedisTime(t *testing.T) {
	rdb := redistest.Client(t)
	limit := slidelimit.PerMinute(1000)
	lim, prefix := newLimiter(t, rdb, limit)
	key, err := slidelimit.Key(prefix, "s", limit)
	if err != nil {
		t.Fatal(err)
	}
	since, admitted := redisNow(t, rdb).UnixMicro(), 0
	for i := range 300 {
		if res := allow(t, lim, "s"); !res.Allowed {
			t.Fatalf("Allow #%d = %+v, want allowed", i, res)
		}
		admitted++
		after := redisNow(t, rdb).UnixMicro()
		members, err := rdb.ZRangeByScoreWithScores(t.Context(), key, &redis.ZRangeBy{Min: "0", Max: "+inf"}).Result()
		if err != nil || len(members) != admitted {
			t.Fatalf("after admission #%d: ZRANGE %s = %d members, %v; want %d", i, key, len(members), err, admitted)
		}
		for _, m := range members {
			if s := int64(m.Score); float64(s) != m.Score || s < since || s > after {
				t.Fatalf("after admission #%d: a member scored %f, want an integer in [%d, %d] (Redis TIME in µs)", i, m.Score, since, after)
			}
		}
		if admitted == 100 {
			// Start again: the key stays a small listpack.
			if err := rdb.Del(t.Context(), key).Err(); err != nil {
				t.Fatal(err)
			}
			since, admitted = redisNow(t, rdb).UnixMicro(), 0
		}
	}
}
