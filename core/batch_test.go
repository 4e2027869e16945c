package slidelimit

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// batchArgs returns allow.lua's ARGV for a batch of requests, each one
// limit of quota per minute: "*", then per request 1 key, the cost, the id
// and "" for Redis TIME, the quota and the window in µs.
func batchArgs(quota int, ids ...string) []any {
	args := []any{"*"}
	for _, id := range ids {
		args = append(args, 1, 1, id, "", quota, time.Minute.Microseconds())
	}
	return args
}

// runBatch runs allow.lua's batch form and returns its reply, one element
// per request: an []any of integers or a redis.Error.
func runBatch(t *testing.T, rdb *redis.Client, keys []string, args []any) []any {
	t.Helper()
	reply, err := allowScript.Run(t.Context(), rdb, keys, args...).Slice()
	if err != nil {
		t.Fatalf("batch: %v", err)
	}
	if len(reply) != len(keys) {
		t.Fatalf("batch of %d requests: %d replies", len(keys), len(reply))
	}
	return reply
}

// TestScriptBatchDecidesInOrder runs allow.lua's batch form: its requests
// are decided one after another, as that many calls would be, under one
// Redis TIME.
func TestScriptBatchDecidesInOrder(t *testing.T) {
	rdb := redistest.Client(t)
	p := redistest.Prefix(t)
	a, b := p+"{a}:5/1m", p+"{b}:5/1m"
	keys := []string{a, a, a, b, a, a, a, a}
	ids := []string{"a1", "a2", "a3", "b1", "a4", "a5", "a6", "a1"}
	reply := runBatch(t, rdb, keys, batchArgs(5, ids...))
	// allowed, duplicate, remaining, retry (0 when admitted), reset
	want := []struct{ allowed, duplicate, remaining int64 }{
		{1, 0, 4}, {1, 0, 3}, {1, 0, 2}, {1, 0, 4}, {1, 0, 1}, {1, 0, 0},
		{0, 0, 0}, // a6: the window is full
		{1, 1, 0}, // a1 again: a retried call, admitted before, not added
	}
	for i, r := range reply {
		got, ok := r.([]any)
		if !ok || len(got) != 5 {
			t.Fatalf("request %d (%s): reply %v, want 5 integers", i, ids[i], r)
		}
		w := want[i]
		if got[0] != w.allowed || got[1] != w.duplicate || got[2] != w.remaining {
			t.Errorf("request %d (%s): reply %v, want allowed %d, duplicate %d, remaining %d", i, ids[i], got, w.allowed, w.duplicate, w.remaining)
		}
		if retry := got[3].(int64); (w.allowed == 0) != (retry > 0) {
			t.Errorf("request %d (%s): retry after %dµs, want it above 0 exactly for a denial", i, ids[i], retry)
		}
	}
	members, err := rdb.ZRangeWithScores(t.Context(), a, 0, -1).Result()
	if err != nil || len(members) != 5 {
		t.Fatalf("ZRANGE %s = %v, %v; want the 5 admitted requests", a, members, err)
	}
	other, err := rdb.ZRangeWithScores(t.Context(), b, 0, -1).Result()
	if err != nil || len(other) != 1 {
		t.Fatalf("ZRANGE %s = %v, %v; want 1 request", b, other, err)
	}
	for _, m := range append(members, other...) {
		if m.Score != members[0].Score {
			t.Errorf("member %v scored %f, want %f: a batch reads TIME once", m.Member, m.Score, members[0].Score)
		}
	}
}

// TestScriptBatchIsolatesErrors runs a batch in which one request's key
// holds a string and another's quota is not a number: those two get error
// replies of their own, and the requests around them are decided.
func TestScriptBatchIsolatesErrors(t *testing.T) {
	rdb := redistest.Client(t)
	p := redistest.Prefix(t)
	bad := p + "{bad}:5/1m"
	if err := rdb.Set(t.Context(), bad, "a string", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	keys := []string{p + "{x}:5/1m", bad, p + "{y}:5/1m", p + "{z}:5/1m"}
	args := batchArgs(5, "x1", "bad1", "y1", "z1")
	args[len(args)-2] = "not a number" // z1's quota
	reply := runBatch(t, rdb, keys, args)
	for i, want := range []string{"", "WRONGTYPE", "", "ERR "} {
		err, isErr := reply[i].(error)
		switch {
		case want == "" && isErr:
			t.Errorf("request %d: %v, want a decision", i, err)
		case want != "" && (!isErr || !strings.HasPrefix(err.Error(), want)):
			t.Errorf("request %d: reply %v, want an error starting %q", i, reply[i], want)
		}
	}
	for _, k := range []string{keys[0], keys[2]} {
		if n, err := rdb.ZCard(t.Context(), k).Result(); err != nil || n != 1 {
			t.Errorf("ZCARD %s = %d, %v; want 1", k, n, err)
		}
	}
}

// TestBatchReadsTheRecordAnotherRequestWrote runs a batch whose first
// request creates an identity's log and its retention record for an hour,
// and whose second, on the same log, enforces shorter windows only: the
// second must see the record the first wrote, and so keep the hour, not
// what the first request found before it wrote.
func TestBatchReadsTheRecordAnotherRequestWrote(t *testing.T) {
	rdb := redistest.Client(t)
	log := redistest.Prefix(t) + "{a}"
	hour, minute, tenSeconds := time.Hour.Microseconds(), time.Minute.Microseconds(), 10*time.Second.Microseconds()
	keys := []string{log, log, log}
	args := []any{"*", 1, 1, "r1", "", 5, hour, 2, 1, "r2", "", 5, minute, 5, tenSeconds}
	reply, err := allowScript.Run(t.Context(), rdb, keys, args...).Slice()
	if err != nil || len(reply) != 2 {
		t.Fatalf("batch = %v, %v; want two replies", reply, err)
	}
	for i, r := range reply {
		if got, ok := r.([]any); !ok || got[0] != int64(1) {
			t.Fatalf("request %d: reply %v, want admitted", i+1, r)
		}
	}
	rec, err := rdb.Get(t.Context(), log+":#keep").Result()
	if want := strconv.FormatInt(hour, 10) + ":"; err != nil || !strings.HasPrefix(rec, want) {
		t.Errorf("retention record %q, %v; want the hour the first request kept (%s…)", rec, err, want)
	}
}
