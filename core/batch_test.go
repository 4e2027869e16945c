package slidelimit

import (
	"errors"
	"fmt"
	"strings"
	"sync"
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

// TestWireBatches pauses Redis while callers of two limiters on one client
// pile up, so that their calls go out in batches: every identity is held
// to its limits exactly, every caller gets its own decision, and an
// identity whose key holds another type fails alone.
func TestWireBatches(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := ownClient(t, redis.Options{Addr: srv.Addr})
	admin := ownClient(t, redis.Options{Addr: srv.Addr})
	one, err := New(rdb, PerMinute(5), WithTimeout(10*time.Second), WithDenyCache(0), WithPrefix("one:"))
	if err != nil {
		t.Fatal(err)
	}
	two, err := New(rdb, PerMinute(7), WithLimits(Per(3, time.Hour)), WithTimeout(10*time.Second), WithDenyCache(0), WithPrefix("two:"))
	if err != nil {
		t.Fatal(err)
	}
	key, err := Key("one:", "hostile", PerMinute(5))
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Set(t.Context(), key, "a string", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := one.Peek(t.Context(), "warm"); err != nil {
		t.Fatal(err)
	}
	const identities, calls = 20, 8
	type outcome struct {
		lim      string
		identity string
		res      Result
		err      error
	}
	out := make(chan outcome, 2*identities*calls+calls)
	var wg sync.WaitGroup
	run := func(name string, lim *Limiter, identity string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := lim.Allow(t.Context(), identity)
			out <- outcome{name, identity, res, err}
		}()
	}
	pause(t, admin, 300*time.Millisecond)
	for c := range calls {
		for i := range identities {
			run("one", one, fmt.Sprint("id-", i))
			run("two", two, fmt.Sprint("id-", i))
		}
		run("one", one, "hostile")
		_ = c
	}
	wg.Wait()
	close(out)

	admitted := map[string][]int{} // lim/identity → Remaining of each admission
	for o := range out {
		name := o.lim + "/" + o.identity
		switch {
		case o.identity == "hostile":
			if !o.res.Fallback || !errors.Is(o.err, ErrUnavailable) || !strings.Contains(o.err.Error(), "WRONGTYPE") {
				t.Errorf("%s: %+v, %v; want a fallback for WRONGTYPE", name, o.res, o.err)
			}
		case o.err != nil || o.res.Fallback:
			t.Errorf("%s: %+v, %v; want Redis's decision", name, o.res, o.err)
		case o.res.Allowed:
			admitted[name] = append(admitted[name], o.res.Remaining)
		case o.res.RetryAfter <= 0:
			t.Errorf("%s: denied with RetryAfter %v, want it above 0", name, o.res.RetryAfter)
		}
	}
	for i := range identities {
		for lim, quota := range map[string]int{"one": 5, "two": 3} {
			name := fmt.Sprintf("%s/id-%d", lim, i)
			seen := map[int]bool{}
			for _, r := range admitted[name] {
				seen[r] = true
			}
			if len(admitted[name]) != quota || len(seen) != quota {
				t.Errorf("%s: admitted with Remaining %v, want %d admissions, each its own Remaining", name, admitted[name], quota)
			}
		}
	}
	w := testWire(rdb)
	writes, commands, batched := w.nodes.writes.Load(), w.nodes.commands.Load(), w.nodes.batched.Load()
	t.Logf("%d calls in %d writes, %d of them in batches", commands, writes, batched)
	if batched < commands/2 {
		t.Errorf("%d of %d calls went out in batches, want most: they piled up behind a paused Redis", batched, commands)
	}
}
