package integration

import (
	"crypto/rand"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// memorySizes are the numbers of in-window requests measured: up to 128
// members a sorted set is a listpack (zset-max-listpack-entries), above it
// a skiplist; the log's record is one of its members, so up to 127
// requests.
var memorySizes = []int{1, 16, 64, 127, 128, 1000}

// maxListpackBytesPerRequest is the target for a key holding at
// most 128 requests. Memory is deterministic for one Redis version, so it
// is asserted.
const maxListpackBytesPerRequest = 25

// TestMemoryPerRequest measures, with MEMORY USAGE, what one in-window
// request costs in Redis: (usage(k) - usage(1)) / (k - 1) for a key holding
// k requests, recorded by the limiter itself. It measures, in the same run
// and with the same scores, the naive member format
// "<13-digit ms>-<36-char uuid>", written with ZADD. It logs a table (go
// test -v shows it) and asserts the listpack target.
func TestMemoryPerRequest(t *testing.T) {
	rdb := redistest.Client(t)
	if enc, err := rdb.ConfigGet(t.Context(), "zset-max-listpack-entries").Result(); err == nil {
		t.Logf("zset-max-listpack-entries = %s", enc["zset-max-listpack-entries"])
	}
	prefix := redistest.Prefix(t)
	limit := slidelimit.PerHour(slidelimit.MaxExactQuota) // counted exactly, one member per unit
	lim := newLimiter(t, rdb, prefix, limit, slidelimit.WithTimeout(10*time.Second))

	type row struct {
		k                  int
		encoding           string
		ours, naive        int64 // MEMORY USAGE in bytes
		oursPerReq, naiveP float64
	}
	var rows []row
	for _, k := range memorySizes {
		identity := fmt.Sprintf("mem-%d", k)
		key, err := slidelimit.Key(prefix, identity, limit)
		if err != nil {
			t.Fatalf("Key(%q) = %v", identity, err)
		}
		admit(t, lim, identity, k)
		naiveKey := prefix + "naive:" + identity
		writeNaive(t, rdb, key, naiveKey)
		if got := zcardKey(t, rdb, naiveKey); got != int64(k) { // units, the record left out
			t.Fatalf("ZCARD %s = %d, want %d", naiveKey, got, k)
		}
		r := row{k: k, ours: memoryUsage(t, rdb, key), naive: memoryUsage(t, rdb, naiveKey)}
		r.encoding, err = rdb.ObjectEncoding(t.Context(), key).Result()
		if err != nil {
			t.Fatalf("OBJECT ENCODING %s: %v", key, err)
		}
		if naiveEnc, _ := rdb.ObjectEncoding(t.Context(), naiveKey).Result(); naiveEnc != r.encoding {
			t.Errorf("k=%d: encoding of the naive key = %s, ours = %s; the comparison is unfair", k, naiveEnc, r.encoding)
		}
		if k > 1 {
			r.oursPerReq = float64(r.ours-rows[0].ours) / float64(k-1)
			r.naiveP = float64(r.naive-rows[0].naive) / float64(k-1)
		}
		rows = append(rows, r)
	}

	var tbl strings.Builder
	fmt.Fprintf(&tbl, "\n%-9s %-9s %12s %10s %14s %10s\n", "requests", "encoding", "usage bytes", "B/request", "naive bytes", "B/request")
	for _, r := range rows {
		fmt.Fprintf(&tbl, "%-9d %-9s %12d %10.1f %14d %10.1f\n", r.k, r.encoding, r.ours, r.oursPerReq, r.naive, r.naiveP)
	}
	t.Log(strings.TrimSuffix(tbl.String(), "\n"))

	for _, r := range rows {
		wantEnc := "listpack"
		if r.k > 127 {
			wantEnc = "skiplist"
		}
		if r.encoding != wantEnc {
			t.Errorf("OBJECT ENCODING of a key holding %d requests = %s, want %s", r.k, r.encoding, wantEnc)
		}
		if r.k > 1 && r.k <= 127 && r.oursPerReq > maxListpackBytesPerRequest {
			t.Errorf("a key holding %d requests uses %.1f B/request, want at most %d", r.k, r.oursPerReq, maxListpackBytesPerRequest)
		}
	}
}

// admit makes k admitted calls by identity, concurrently.
func admit(t *testing.T, lim *slidelimit.Limiter, identity string, k int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, k)
	work := make(chan struct{}, k)
	for range k {
		work <- struct{}{}
	}
	close(work)
	for range min(k, 16) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range work {
				res, err := lim.Allow(t.Context(), identity)
				if err == nil && !res.Allowed {
					err = fmt.Errorf("denied, Remaining %d", res.Remaining)
				}
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Allow(%q) = %v, want admitted", identity, err)
	}
}

// writeNaive copies the scores of key into naiveKey, each with a member in
// the naive format: 13-digit milliseconds, '-', a 36-character UUID.
func writeNaive(t *testing.T, rdb redis.UniversalClient, key, naiveKey string) {
	t.Helper()
	scores, err := rdb.ZRangeWithScores(t.Context(), key, 0, -1).Result()
	if err != nil {
		t.Fatalf("ZRANGE %s: %v", key, err)
	}
	members := make([]redis.Z, len(scores))
	for i, z := range scores {
		members[i] = redis.Z{Score: z.Score, Member: fmt.Sprintf("%013d-%s", int64(z.Score)/1000, uuid())}
		if z.Score < 0 {
			members[i] = z // the log's record, kept as it is
		}
	}
	if err := rdb.ZAdd(t.Context(), naiveKey, members...).Err(); err != nil {
		t.Fatalf("ZADD %s: %v", naiveKey, err)
	}
	if err := rdb.Expire(t.Context(), naiveKey, time.Hour).Err(); err != nil {
		t.Fatalf("EXPIRE %s: %v", naiveKey, err)
	}
}

// uuid returns a random version-4 UUID in its 36-character text form.
func uuid() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func zcardKey(t *testing.T, rdb redis.UniversalClient, key string) int64 {
	t.Helper()
	return logUnits(t, rdb, key)
}

// memoryUsage returns MEMORY USAGE key SAMPLES 0: every member counted.
func memoryUsage(t *testing.T, rdb redis.UniversalClient, key string) int64 {
	t.Helper()
	n, err := rdb.MemoryUsage(t.Context(), key, 0).Result()
	if err != nil {
		t.Fatalf("MEMORY USAGE %s: %v", key, err)
	}
	return n
}

// maxSteppedDayBytes is the target for a 100,000/day identity at
// one-minute steps, at full quota.
const maxSteppedDayBytes = 150_000

// TestSteppedMemoryAtFullQuota fills a 100,000/day limit at one-minute steps
// to its quota over a whole day of a fake clock, a share in every step, so
// that every bucket exists and the ids set is full, and asserts the target
// on the MEMORY USAGE of all the identity's keys. (make bench prints the
// figures beside the exact log's.)
func TestSteppedMemoryAtFullQuota(t *testing.T) {
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	const quota, steps = 100_000, 1440
	limit := slidelimit.PerDay(quota).Stepped(time.Minute)
	now := time.Now().Truncate(time.Minute)
	lim := newLimiter(t, rdb, prefix, limit, slidelimit.WithTimeout(10*time.Second),
		slidelimit.WithDenyCache(0), slidelimit.WithClock(func() time.Time { return now }))
	for i := range steps {
		cost := quota / steps
		if i < quota%steps {
			cost++
		}
		res, err := lim.AllowN(t.Context(), "day", cost)
		if err != nil || !res.Allowed {
			t.Fatalf("step %d: AllowN(%d) = %+v, %v; want admitted", i, cost, res, err)
		}
		now = now.Add(time.Minute)
	}
	now = now.Add(-time.Minute)
	if res, err := lim.Peek(t.Context(), "day"); err != nil || res.Allowed || res.Remaining != 0 {
		t.Fatalf("Peek at full quota = %+v, %v; want denied with 0 left", res, err)
	}
	key, err := slidelimit.Key(prefix, "day", limit)
	if err != nil {
		t.Fatal(err)
	}
	total := memoryUsage(t, rdb, key) + memoryUsage(t, rdb, key+":ids")
	t.Logf("100,000/day at 1m steps, full quota: %d B", total)
	if total > maxSteppedDayBytes {
		t.Errorf("a 100,000/day identity at one-minute steps holds %d B at full quota, want at most %d", total, maxSteppedDayBytes)
	}
}

// TestSettleHorizonMemory measures what a stepped limit's ids cost an
// identity: every request it admitted in the last min(window, 15 minutes)
// (and up to a sixteenth more) keeps its id, whatever its cost, so the ids
// grow with the request rate times the horizon, not with the quota or the
// cost. It runs 17 minutes of a fake clock at
// two rates, and checks that the ids hold what the horizon says and that
// the bytes stay within the bound core's README states:
//   - 100,000 requests a day (1.16 a second) of cost 1, PerDay(100_000);
//   - 10^9 units a day as requests of 1,000 (11.6 a second), PerDay(1e9).
func TestSettleHorizonMemory(t *testing.T) {
	rdb := redistest.Client(t)
	for _, c := range []struct {
		name     string
		quota    int
		perDay   int // requests a day
		cost     int
		maxPerID int64 // bytes a request in the horizon may take
	}{
		{"100,000/day", 100_000, 100_000, 1, 130},
		{"1e9/day", 1_000_000_000, 1_000_000, 1000, 130},
	} {
		t.Run(c.name, func(t *testing.T) {
			prefix := redistest.Prefix(t)
			limit := slidelimit.PerDay(c.quota)
			now := time.Now().Truncate(time.Minute)
			lim := newLimiter(t, rdb, prefix, limit, slidelimit.WithTimeout(10*time.Second),
				slidelimit.WithDenyCache(0), slidelimit.WithClock(func() time.Time { return now }))
			every := 24 * time.Hour / time.Duration(c.perDay)
			n := int(17 * time.Minute / every)
			for i := range n {
				res, err := lim.AllowN(t.Context(), "id", c.cost)
				if err != nil || !res.Allowed {
					t.Fatalf("admission %d: %+v, %v; want admitted", i, res, err)
				}
				now = now.Add(every)
			}
			key, err := slidelimit.Key(prefix, "id", limit)
			if err != nil {
				t.Fatal(err)
			}
			ids := key + ":ids"
			held, err := rdb.ZCard(t.Context(), ids).Result()
			if err != nil {
				t.Fatal(err)
			}
			// Each request of the last 15 minutes, and up to a sixteenth
			// more, one member each whatever its cost (a second only once
			// settled to another); the set's own.
			const members = 1
			lo := int64(15 * time.Minute / every)
			hi := int64((15*time.Minute+15*time.Minute/16)/every+1) + 1
			if held < lo || held > hi {
				t.Errorf("the ids hold %d members, want %d to %d", held, lo, hi)
			}
			log, set := memoryUsage(t, rdb, key), memoryUsage(t, rdb, ids)
			perID := set / (held / members)
			t.Logf("%s: %d requests in the horizon; log %d B, ids %d B (%d B a request)", c.name, held/members, log, set, perID)
			if perID > c.maxPerID {
				t.Errorf("the ids take %d B a request, want at most %d", perID, c.maxPerID)
			}
		})
	}
}
