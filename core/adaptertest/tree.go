package adaptertest

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// treeOf returns a tree function (Settings.Tree) of the tenant "acme" held
// to org, whose value "team/key" names a team, "team:" + team, held to
// team, and an API key, "key:" + key, held to key. A value without "/" is
// an error wrapping slidelimit.ErrInvalidKey; an empty team is a level
// without limits, an invalid tree.
func treeOf(org, team, key []slidelimit.Limit) func(string) (string, []slidelimit.Level, error) {
	return func(v string) (string, []slidelimit.Level, error) {
		tm, k, ok := strings.Cut(v, "/")
		if !ok {
			return "", nil, fmt.Errorf("%w: no team/key in %q", slidelimit.ErrInvalidKey, v)
		}
		teamLimits := team
		if tm == "" {
			teamLimits = nil
		}
		return "acme", []slidelimit.Level{
			{Limits: org},
			{Identity: "team:" + tm, Limits: teamLimits},
			{Identity: "key:" + k, Limits: key},
		}, nil
	}
}

// limits returns ls as a slice.
func limits(ls ...slidelimit.Limit) []slidelimit.Limit { return ls }

// tree runs the scenarios of a tenant's tree.
func tree(t *testing.T, a Adapter) {
	for _, sc := range []scenario{
		{"levels", treeLevels},
		{"burst", treeBurst},
		{"errors", treeErrors},
		{"failure", treeFailure},
		{"settle", treeSettle},
		{"in flight", treeInFlight},
	} {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			sc.run(t, a)
		})
	}
}

// remainingByName returns the r parameter of each item of a RateLimit
// field, by the item's name.
func remainingByName(field string) map[string]string {
	out := map[string]string{}
	for _, item := range strings.Split(field, ",") {
		params := strings.Split(strings.TrimSpace(item), ";")
		name := strings.Trim(params[0], `"`)
		for _, p := range params[1:] {
			if r, ok := strings.CutPrefix(p, "r="); ok {
				out[name] = r
			}
		}
	}
	return out
}

// treeLevels sends requests of keys of two teams of one organisation,
// against a clock frozen at the test's start, until each level in turn
// denies: each denial names the limit of its level (X-RateLimit-Limit,
// the problem's policy), and the remaining counts of every level, in the
// RateLimit field of the requests after it, show it recorded nothing at
// any level.
func treeLevels(t *testing.T, a Adapter) {
	srv := a(t, Settings{
		Limiter: NewLimiter(t, redistest.Client(t), slidelimit.Per(1000, time.Minute), frozen()),
		Tree: treeOf(limits(slidelimit.PerMinute(5).Named("org")), limits(slidelimit.PerMinute(3).Named("team")),
			limits(slidelimit.PerMinute(2).Named("key"))),
	})
	const policy = `"org";q=5;w=60, "team";q=3;w=60, "key";q=2;w=60`
	for i, tt := range []struct {
		tree           string
		status         int
		bound          string // the deciding limit, "" where two tie
		xLimit         string // its quota, as X-RateLimit-Limit
		org, team, key string // what each level has left
	}{
		{"t1/a1", http.StatusOK, "key", "2", "4", "2", "1"},
		{"t1/a1", http.StatusOK, "key", "2", "3", "1", "0"},
		{"t1/a1", http.StatusTooManyRequests, "key", "2", "3", "1", "0"},
		// The key's denial took nothing from its team nor its organisation.
		{"t1/a2", http.StatusOK, "team", "3", "2", "0", "1"},
		{"t1/a3", http.StatusTooManyRequests, "team", "3", "2", "0", "2"},
		// The team's denial took nothing from the key nor the organisation.
		{"t2/a3", http.StatusOK, "", "", "1", "2", "1"},
		{"t2/b1", http.StatusOK, "org", "5", "0", "1", "1"},
		{"t2/b2", http.StatusTooManyRequests, "org", "5", "0", "1", "2"},
		// The organisation's denial took nothing from the team nor the key.
		{"t2/b2", http.StatusTooManyRequests, "org", "5", "0", "1", "2"},
	} {
		what := fmt.Sprintf("request %d, tree %s", i+1, tt.tree)
		r := get(t, srv, "/a", TreeHeader, tt.tree)
		if tt.status == http.StatusTooManyRequests {
			wantDenied(t, what, r)
			if r.Body != nil {
				problem(t, r, tt.bound, 60)
			}
		} else if r.Status != tt.status {
			t.Errorf("%s = %d, want %d", what, r.Status, tt.status)
		}
		if got := r.Header.Get(slidelimit.FieldRateLimitPolicy); got != policy {
			t.Errorf("%s: RateLimit-Policy %q, want %q", what, got, policy)
		}
		want := map[string]string{"org": tt.org, "team": tt.team, "key": tt.key}
		if got := remainingByName(r.Header.Get(slidelimit.FieldRateLimit)); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: RateLimit %q, want remaining %v", what, r.Header.Get(slidelimit.FieldRateLimit), want)
		}
		if got := r.Header.Get(slidelimit.FieldXRateLimitLimit); tt.xLimit != "" && got != tt.xLimit {
			t.Errorf("%s: X-RateLimit-Limit %q, want %s's %s", what, got, tt.bound, tt.xLimit)
		}
	}
}

// treeBurst sends concurrent requests of many keys of two teams, each
// team allowed 6, against an organisation allowed 10, on standalone Redis
// and on Redis Cluster: exactly the organisation's 10 are admitted.
func treeBurst(t *testing.T, a Adapter) {
	for _, rc := range []struct {
		name string
		rdb  func(testing.TB) redis.Scripter
	}{
		{"standalone", func(t testing.TB) redis.Scripter { return redistest.Client(t) }},
		{"cluster", func(t testing.TB) redis.Scripter { return redistest.ClusterClient(t) }},
	} {
		t.Run(rc.name, func(t *testing.T) {
			const quota, n = 10, 40
			srv := a(t, Settings{
				Limiter: NewLimiter(t, rc.rdb(t), slidelimit.Per(1000, time.Minute)),
				Tree: treeOf(limits(slidelimit.PerMinute(quota).Named("org")), limits(slidelimit.PerMinute(6).Named("team")),
					limits(slidelimit.PerMinute(2).Named("key"))),
			})
			busyLoops(t)
			burstOf(t, n, quota, func(i int) Response { return get(t, srv, "/a", TreeHeader, fmt.Sprintf("t%d/k%d", i%2, i)) })
		})
	}
}

// treeErrors checks a tree function's error and an invalid tree: each is
// the server's error, reported to the hook, and records nothing.
func treeErrors(t *testing.T, a Adapter) {
	var errs ErrorLog
	srv := a(t, Settings{
		Limiter: NewLimiter(t, redistest.Client(t), slidelimit.Per(1000, time.Minute)),
		Tree: treeOf(limits(slidelimit.PerMinute(5).Named("org")), limits(slidelimit.PerMinute(3).Named("team")),
			limits(slidelimit.PerMinute(2).Named("key"))),
		Hook: errs.Hook,
	})
	serverError(t, srv, &errs, "request whose tree function fails", slidelimit.ErrInvalidKey, TreeHeader, "no tree")
	serverError(t, srv, &errs, "request of a level without limits", slidelimit.ErrInvalidLimit, TreeHeader, "/k")
	r := get(t, srv, "/a", TreeHeader, "t/k")
	if got := r.Header.Get(slidelimit.FieldRateLimit); r.Status != http.StatusOK || !strings.HasPrefix(got, `"org";r=4;`) {
		t.Errorf("request after the failed ones = %d with RateLimit %q, want 200 with the organisation's 4 left", r.Status, got)
	}
}

// treeFailure stops Redis under each failure policy while requests of a
// tree come: fail-open admits them with no quota fields, fail-closed
// answers 503, fail-local limits them in the process at every level, the
// key's limit denying as it would with Redis; each failure reaches the
// error hook, and limiting comes back with Redis.
func treeFailure(t *testing.T, a Adapter) {
	for _, tt := range []struct {
		policy slidelimit.FailurePolicy
		down   []int // the statuses of four requests of one key with Redis down
	}{
		{slidelimit.FailOpen, Statuses(4, http.StatusOK)},
		{slidelimit.FailClosed, Statuses(4, http.StatusServiceUnavailable)},
		{slidelimit.FailLocal, Statuses(2, http.StatusOK, http.StatusTooManyRequests, http.StatusTooManyRequests)},
	} {
		t.Run(tt.policy.String(), func(t *testing.T) {
			t.Parallel()
			redisSrv := redistest.StartServer(t)
			rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
			t.Cleanup(func() { _ = rdb.Close() })
			lim, err := slidelimit.New(rdb, slidelimit.Per(1000, time.Minute), slidelimit.WithPrefix(redistest.Prefix(t)),
				slidelimit.WithFailurePolicy(tt.policy), slidelimit.WithBreaker(0, 0), slidelimit.WithDenyCache(0))
			if err != nil {
				t.Fatal(err)
			}
			var errs ErrorLog
			srv := a(t, Settings{Limiter: lim, Hook: errs.Hook,
				Tree: treeOf(limits(slidelimit.PerMinute(10).Named("org")), limits(slidelimit.PerMinute(10).Named("team")),
					limits(slidelimit.PerMinute(2).Named("key")))})
			if r := get(t, srv, "/a", TreeHeader, "t/up"); r.Status != http.StatusOK || r.Header.Get(slidelimit.FieldRateLimit) == "" {
				t.Fatalf("request with Redis up = %d with RateLimit %q, want 200 with", r.Status, r.Header.Get(slidelimit.FieldRateLimit))
			}

			redisSrv.Stop()
			for i, want := range tt.down {
				r := get(t, srv, "/a", TreeHeader, "t/down")
				what := fmt.Sprintf("%v: request %d of a tree with Redis down", tt.policy, i+1)
				if r.Status != want {
					t.Errorf("%s = %d, want %d", what, r.Status, want)
				}
				if tt.policy == slidelimit.FailLocal {
					if got := remainingByName(r.Header.Get(slidelimit.FieldRateLimit)); len(got) != 3 {
						t.Errorf("%s: RateLimit %q, want the local shares of every level", what, r.Header.Get(slidelimit.FieldRateLimit))
					}
				} else {
					noQuotaFields(t, what, r)
				}
				if want == http.StatusTooManyRequests && r.Header.Get(slidelimit.FieldXRateLimitLimit) != "2" {
					t.Errorf("%s: X-RateLimit-Limit %q, want the key's 2", what, r.Header.Get(slidelimit.FieldXRateLimitLimit))
				}
				if e := errs.Take(); len(e) != 1 || !errors.Is(e[0], slidelimit.ErrUnavailable) {
					t.Errorf("%s: hook got %v, want one error wrapping ErrUnavailable", what, e)
				}
			}

			redisSrv.Restart()
			deadline := time.Now().Add(10 * time.Second)
			for {
				r := get(t, srv, "/a", TreeHeader, "t/back")
				if r.Header.Get(slidelimit.FieldRateLimit) != "" && len(errs.Take()) == 0 {
					break // decided by Redis: no failure reported
				}
				if time.Now().After(deadline) {
					t.Fatalf("request after Redis came back = %d with RateLimit %q, want limiting back", r.Status, r.Header.Get(slidelimit.FieldRateLimit))
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// treeSettle admits requests of a tree at an estimate and settles each,
// at every level, to the usage its response reports, a whole body's or a
// stream's; a failed one is refunded at every level. A request after
// each shows what every level has left.
func treeSettle(t *testing.T, a Adapter) {
	srv := a(t, Settings{
		Limiter: NewLimiter(t, redistest.Client(t), slidelimit.Per(1000, time.Minute)),
		Tree: treeOf(limits(slidelimit.PerMinute(100).Named("org")), limits(slidelimit.PerMinute(60).Named("team")),
			limits(slidelimit.PerMinute(40).Named("key"))),
		CostHeader: "X-Cost", Settle: true, RefundFailed: true,
	})
	send := func(cost, usage int, stream bool, status int) Response {
		t.Helper()
		h := http.Header{"X-Cost": {strconv.Itoa(cost)}, TreeHeader: {"t/k"}}
		return srv(t, Request{Peer: peer4, Path: "/a", Header: h, Usage: usage, Stream: stream, Status: status})
	}
	used := 0
	for i, tt := range []struct {
		what                string
		cost, usage, status int
		stream              bool
		counts              int // what the request counts once it has ended
	}{
		{"a body of 5 units, admitted at 20", 20, 5, 200, false, 5},
		{"a stream of 3 units, admitted at 10", 10, 3, 200, true, 3},
		{"a body without usage, admitted at 4", 4, 0, 200, false, 4},
		{"a body of 12 units, admitted at 1", 1, 12, 200, false, 12},
		{"a failed body of 2 units, admitted at 7", 7, 2, 500, false, 0},
	} {
		if r := send(tt.cost, tt.usage, tt.stream, tt.status); r.Status != tt.status {
			t.Fatalf("request %d, %s = %d, want %d", i+1, tt.what, r.Status, tt.status)
		}
		used += tt.counts
		r := send(1, 1, false, 200) // settled to its estimate: counts 1
		used++
		want := map[string]string{"org": strconv.Itoa(100 - used), "team": strconv.Itoa(60 - used), "key": strconv.Itoa(40 - used)}
		if got := remainingByName(r.Header.Get(slidelimit.FieldRateLimit)); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("after %s: RateLimit %q, want remaining %v", tt.what, r.Header.Get(slidelimit.FieldRateLimit), want)
		}
	}
}

// treeInFlight holds a request of a team whose level allows one request
// in flight: while it runs, whether its body is one piece or a stream
// under way, another key of the team is denied and a key of another team
// admitted; once it has ended, failed or not, settled or not, its team's
// place is back.
func treeInFlight(t *testing.T, a Adapter) {
	for _, settle := range []bool{false, true} {
		for _, stream := range []bool{false, true} {
			name := map[bool]string{false: "body", true: "stream"}[stream] + map[bool]string{false: "", true: ", settled"}[settle]
			t.Run(name, func(t *testing.T) {
				srv := a(t, Settings{
					Limiter: NewLimiter(t, redistest.Client(t), slidelimit.Per(1000, time.Minute)),
					Tree: treeOf(limits(slidelimit.PerMinute(100).Named("org")),
						limits(slidelimit.PerMinute(100).Named("team"), slidelimit.InFlight(1, time.Minute).Named("team-in-flight")),
						limits(slidelimit.PerMinute(100).Named("key"))),
					Settle: settle,
				})
				for i, status := range []int{http.StatusOK, http.StatusInternalServerError} {
					gate := NewGate(t)
					done := make(chan Response, 1)
					go func() {
						done <- srv(t, Request{Peer: peer4, Path: "/a", Header: http.Header{TreeHeader: {"t1/a"}},
							Usage: 2, Stream: stream, Gate: gate, Status: status})
					}()
					select {
					case <-gate.Entered():
					case r := <-done:
						t.Fatalf("round %d: the held request ended before its handler was reached: %d", i+1, r.Status)
					case <-time.After(10 * time.Second):
						t.Fatalf("round %d: the held request did not reach its handler in 10s", i+1)
					}
					if r := get(t, srv, "/a", TreeHeader, "t1/b"); r.Status != http.StatusTooManyRequests {
						t.Errorf("round %d: another key of the team while one is in flight = %d, want 429", i+1, r.Status)
					}
					if r := get(t, srv, "/a", TreeHeader, "t2/c"); r.Status != http.StatusOK {
						t.Errorf("round %d: a key of another team while one is in flight = %d, want 200", i+1, r.Status)
					}
					gate.Open()
					if r := <-done; r.Status != status {
						t.Errorf("round %d: the held request = %d, want %d", i+1, r.Status, status)
					}
					if r := get(t, srv, "/a", TreeHeader, "t1/b"); r.Status != http.StatusOK {
						t.Errorf("round %d: another key of the team after the one in flight ended = %d, want 200", i+1, r.Status)
					}
				}
			})
		}
	}
}
