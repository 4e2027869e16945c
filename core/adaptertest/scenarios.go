package adaptertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/httplimit"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// scenario is one subtest of Run.
type scenario struct {
	name string
	run  func(t *testing.T, a Adapter)
}

var scenarios = []scenario{
	{"burst", burst},
	{"headers", headers},
	{"multiple limits", multipleLimits},
	{"header selection", headerSelection},
	{"failure", failure},
	{"shadow", shadow},
	{"refund", refund},
	{"settle", settle},
	{"in flight", inFlight},
	{"skip", skip},
	{"limiter choice", limiterChoice},
	{"cost", cost},
	{"per-request limits", plans},
	{"tree", tree},
	{"client IP", clientIP},
	{"hostile keys", hostileKeys},
}

// The peers requests come from.
var (
	peer4 = netip.MustParseAddr("127.0.0.1")
	peer6 = netip.MustParseAddr("::1")
)

// frozen returns a clock option frozen at the test's start, so that every
// header value is exact.
func frozen() slidelimit.Option {
	now := time.Now()
	return slidelimit.WithClock(func() time.Time { return now })
}

// get sends a request to path from peer4 with header fields as name, value
// pairs.
func get(t testing.TB, srv Server, path string, header ...string) Response {
	t.Helper()
	h := http.Header{}
	for i := 0; i+1 < len(header); i += 2 {
		h.Add(header[i], header[i+1])
	}
	return srv(t, Request{Peer: peer4, Path: path, Header: h})
}

// quotaFields are the header fields that claim quota.
var quotaFields = []string{slidelimit.FieldRateLimitPolicy, slidelimit.FieldRateLimit,
	slidelimit.FieldXRateLimitLimit, slidelimit.FieldXRateLimitRemaining, slidelimit.FieldXRateLimitReset}

// noQuotaFields fails t if r carries a field that claims quota.
func noQuotaFields(t testing.TB, what string, r Response) {
	t.Helper()
	for _, name := range quotaFields {
		if v := r.Header.Get(name); v != "" {
			t.Errorf("%s: %s = %q, want none", what, name, v)
		}
	}
}

// wantDenied fails t unless r is a denial that says when to retry.
func wantDenied(t testing.TB, what string, r Response) {
	t.Helper()
	if r.Status != http.StatusTooManyRequests {
		t.Errorf("%s = %d, want %d", what, r.Status, http.StatusTooManyRequests)
	}
	if r.Header.Get(slidelimit.FieldRetryAfter) == "" || r.RetryAfter <= 0 {
		t.Errorf("%s: Retry-After %q, retry after %v; want both", what, r.Header.Get(slidelimit.FieldRetryAfter), r.RetryAfter)
	}
}

// busyLoops runs two busy loops beside the rest of the test, until it
// ends or 30 seconds pass, so that exactness holds on a loaded machine.
// They are goroutines, not processes, so that the suite runs wherever Go
// does; they take two of the runtime's threads from the test.
func busyLoops(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ctx.Err() == nil; n++ {
				_ = n * n // spin
			}
		}()
	}
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
}

// burst sends 60 concurrent requests of one client against a quota of 10:
// exactly 10 are admitted and the rest denied, on standalone Redis and on
// Redis Cluster.
func burst(t *testing.T, a Adapter) {
	for _, rc := range []struct {
		name string
		rdb  func(testing.TB) redis.Scripter
	}{
		{"standalone", func(t testing.TB) redis.Scripter { return redistest.Client(t) }},
		{"cluster", func(t testing.TB) redis.Scripter { return redistest.ClusterClient(t) }},
	} {
		t.Run(rc.name, func(t *testing.T) {
			const quota, n = 10, 60
			srv := a(t, Settings{Limiter: NewLimiter(t, rc.rdb(t), slidelimit.Per(quota, time.Minute))})
			busyLoops(t)
			burstOf(t, n, quota, func(int) Response { return get(t, srv, "/a") })
		})
	}
}

// burstOf sends n requests at once, the i-th by send(i), and checks that
// exactly quota of them are admitted and the rest denied.
func burstOf(t *testing.T, n, quota int64, send func(i int) Response) {
	t.Helper()
	var admitted, denied atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range int(n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			switch r := send(i); r.Status {
			case http.StatusOK:
				admitted.Add(1)
			case http.StatusTooManyRequests:
				denied.Add(1)
			default:
				t.Errorf("burst request = %d, want 200 or 429", r.Status)
			}
		}()
	}
	close(start)
	wg.Wait()
	if admitted.Load() != quota || denied.Load() != n-quota {
		t.Errorf("burst of %d: %d admitted, %d denied; want %d, %d", n, admitted.Load(), denied.Load(), quota, n-quota)
	}
}

// headers checks the fields of five admitted requests and of the denial
// after them, against a clock frozen at the test's start.
func headers(t *testing.T, a Adapter) {
	srv := a(t, Settings{Limiter: NewLimiter(t, redistest.Client(t), slidelimit.Per(5, 10*time.Second), frozen())})
	for i := range 6 {
		r := get(t, srv, "/a")
		remaining, retry := strconv.Itoa(max(4-i, 0)), ""
		if i == 5 {
			wantDenied(t, "request 6", r)
			retry = "10"
		} else if r.Status != http.StatusOK {
			t.Errorf("request %d = %d, want 200", i+1, r.Status)
		}
		for name, want := range map[string]string{
			slidelimit.FieldRateLimitPolicy:     `"5/10s";q=5;w=10`,
			slidelimit.FieldRateLimit:           `"5/10s";r=` + remaining + `;t=10`,
			slidelimit.FieldXRateLimitLimit:     "5",
			slidelimit.FieldXRateLimitRemaining: remaining,
			slidelimit.FieldXRateLimitReset:     "10",
			slidelimit.FieldRetryAfter:          retry,
		} {
			if got := r.Header.Get(name); got != want {
				t.Errorf("request %d: %s = %q, want %q", i+1, name, got, want)
			}
		}
		if i == 5 && r.RetryAfter != 10*time.Second {
			t.Errorf("request 6: retry after %v, want 10s", r.RetryAfter)
		}
		if i == 5 && r.Body != nil {
			problem(t, r, "5/10s", 10)
		}
	}
}

// problem fails t unless r's body is the problem document of a denial by
// policy, retry in retry seconds.
func problem(t *testing.T, r Response, policy string, retry int64) {
	t.Helper()
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, httplimit.ContentTypeProblem) {
		t.Errorf("denial: Content-Type %q, want %s", ct, httplimit.ContentTypeProblem)
	}
	var p httplimit.Problem
	if err := json.Unmarshal(r.Body, &p); err != nil {
		t.Fatalf("denial body %q: %v", r.Body, err)
	}
	want := httplimit.Problem{
		Type: httplimit.ProblemTypeQuotaExceeded, Title: http.StatusText(http.StatusTooManyRequests), Status: http.StatusTooManyRequests,
		Detail: fmt.Sprintf("rate limit %s exceeded; retry in %ds", policy, retry), Policy: policy, RetryAfter: retry,
	}
	if p != want {
		t.Errorf("denial problem = %+v, want %+v", p, want)
	}
}

// multipleLimits checks the fields of a limiter with two limits: RateLimit
// lists both, X-RateLimit-* the tighter, and the tighter one denies.
func multipleLimits(t *testing.T, a Adapter) {
	srv := a(t, Settings{Limiter: NewLimiter(t, redistest.Client(t), slidelimit.Per(5, 10*time.Second),
		frozen(), slidelimit.WithLimits(slidelimit.PerMinute(3)))})
	for i, want := range []struct {
		status    int
		rateLimit string
	}{
		{http.StatusOK, `"5/10s";r=4;t=10, "3/1m";r=2;t=60`},
		{http.StatusOK, `"5/10s";r=3;t=10, "3/1m";r=1;t=60`},
		{http.StatusOK, `"5/10s";r=2;t=10, "3/1m";r=0;t=60`},
		{http.StatusTooManyRequests, `"5/10s";r=2;t=10, "3/1m";r=0;t=60`},
	} {
		r := get(t, srv, "/a")
		if r.Status != want.status || r.Header.Get(slidelimit.FieldRateLimit) != want.rateLimit {
			t.Errorf("request %d = %d with RateLimit %q, want %d with %q", i+1, r.Status, r.Header.Get(slidelimit.FieldRateLimit), want.status, want.rateLimit)
		}
		if p := r.Header.Get(slidelimit.FieldRateLimitPolicy); p != `"5/10s";q=5;w=10, "3/1m";q=3;w=60` {
			t.Errorf("request %d: RateLimit-Policy %q, want both limits", i+1, p)
		}
		if l := r.Header.Get(slidelimit.FieldXRateLimitLimit); l != "3" {
			t.Errorf("request %d: X-RateLimit-Limit %q, want the tighter limit's 3", i+1, l)
		}
	}
}

// headerSelection checks that the fields Settings.Headers omits are not
// sent, on admissions and denials.
func headerSelection(t *testing.T, a Adapter) {
	rdb := redistest.Client(t)
	for _, tt := range []struct {
		name            string
		headers         slidelimit.Headers
		present, absent []string
	}{
		{"RateLimit only", slidelimit.Headers{Omit: slidelimit.HeaderXRateLimit},
			[]string{slidelimit.FieldRateLimit, slidelimit.FieldRetryAfter},
			[]string{slidelimit.FieldXRateLimitLimit, slidelimit.FieldXRateLimitRemaining, slidelimit.FieldXRateLimitReset}},
		{"X-RateLimit only", slidelimit.Headers{Omit: slidelimit.HeaderRateLimit | slidelimit.HeaderRetryAfter},
			[]string{slidelimit.FieldXRateLimitRemaining},
			[]string{slidelimit.FieldRateLimit, slidelimit.FieldRateLimitPolicy, slidelimit.FieldRetryAfter}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := a(t, Settings{Limiter: NewLimiter(t, rdb, slidelimit.Per(1, time.Minute)), Headers: tt.headers})
			for i := range 2 {
				r := get(t, srv, "/a")
				for _, name := range tt.present {
					if r.Header.Get(name) == "" && (i == 1 || name != slidelimit.FieldRetryAfter) {
						t.Errorf("request %d lacks %s: %v", i+1, name, r.Header)
					}
				}
				for _, name := range tt.absent {
					if v := r.Header.Get(name); v != "" {
						t.Errorf("request %d has %s %q, want none", i+1, name, v)
					}
				}
			}
		})
	}
}

// failure stops Redis under each failure policy: fail-open admits with no
// quota fields, fail-closed answers 503 with Retry-After, fail-local keeps
// limiting in the process, its denials answered as denials (429 with the
// share's quota fields); each failure reaches the error hook, and limiting
// comes back with Redis.
func failure(t *testing.T, a Adapter) {
	for _, tt := range []struct {
		policy slidelimit.FailurePolicy
		down   []int // the statuses of four requests with Redis down
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
			lim, err := slidelimit.New(rdb, slidelimit.Per(2, time.Minute), slidelimit.WithPrefix(redistest.Prefix(t)),
				slidelimit.WithFailurePolicy(tt.policy), slidelimit.WithBreaker(0, 0), slidelimit.WithDenyCache(0))
			if err != nil {
				t.Fatal(err)
			}
			var errs ErrorLog
			srv := a(t, Settings{Limiter: lim, Hook: errs.Hook})
			if r := get(t, srv, "/a"); r.Status != http.StatusOK || r.Header.Get(slidelimit.FieldRateLimit) == "" {
				t.Fatalf("request with Redis up = %d with RateLimit %q, want 200 with", r.Status, r.Header.Get(slidelimit.FieldRateLimit))
			}

			redisSrv.Stop()
			for i, want := range tt.down {
				r := get(t, srv, "/a")
				what := fmt.Sprintf("%v: request %d with Redis down", tt.policy, i+1)
				if r.Status != want {
					t.Errorf("%s = %d, want %d", what, r.Status, want)
				}
				if tt.policy == slidelimit.FailLocal {
					if r.Header.Get(slidelimit.FieldRateLimit) == "" {
						t.Errorf("%s: no RateLimit field, want the local share's", what)
					}
				} else {
					noQuotaFields(t, what, r)
				}
				if retry := r.Header.Get(slidelimit.FieldRetryAfter); (want != http.StatusOK) != (retry != "" && r.RetryAfter > 0) {
					t.Errorf("%s: Retry-After %q, retry after %v; want them on refusals only", what, retry, r.RetryAfter)
				}
				if e := errs.Take(); len(e) != 1 || !errors.Is(e[0], slidelimit.ErrUnavailable) {
					t.Errorf("%s: hook got %v, want one error wrapping ErrUnavailable", what, e)
				}
			}

			redisSrv.Restart()
			deadline := time.Now().Add(10 * time.Second)
			for {
				r := get(t, srv, "/a")
				if r.Header.Get(slidelimit.FieldRateLimit) != "" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("request after Redis came back = %d with no RateLimit field, want limiting back", r.Status)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// shadow sends six requests against a quota of five: in shadow mode all
// six pass, the sixth with no quota fields nor Retry-After, and the
// observer sees one shadow denial.
func shadow(t *testing.T, a Adapter) {
	var seen atomic.Int64
	observe := func(_ context.Context, o slidelimit.Observation) {
		if o.Outcome() == slidelimit.OutcomeShadowDenied {
			seen.Add(1)
		}
	}
	srv := a(t, Settings{Limiter: NewLimiter(t, redistest.Client(t), slidelimit.Per(5, time.Minute),
		slidelimit.WithShadow(), slidelimit.WithObserver(observe))})
	for i := range 6 {
		r := get(t, srv, "/a")
		if r.Status != http.StatusOK {
			t.Errorf("shadow request %d = %d, want 200", i+1, r.Status)
		}
		if quota := r.Header.Get(slidelimit.FieldRateLimit) != ""; quota != (i < 5) {
			t.Errorf("shadow request %d has quota fields %v, want %v", i+1, quota, i < 5)
		}
		if i == 5 && r.Header.Get(slidelimit.FieldRetryAfter) != "" {
			t.Errorf("shadow denial has Retry-After %q, want none", r.Header.Get(slidelimit.FieldRetryAfter))
		}
	}
	if n := seen.Load(); n != 1 {
		t.Errorf("observer saw %d shadow denials, want 1", n)
	}
}

// refund checks refund by status: with RefundFailed failed requests give
// their unit back, with RefundSuccessful successful ones do.
func refund(t *testing.T, a Adapter) {
	rdb := redistest.Client(t)
	for _, tt := range []struct {
		name           string
		failed, succ   bool
		free, counting int // the status of requests that are refunded, and of those that count
	}{
		{"failed", true, false, http.StatusInternalServerError, http.StatusOK},
		{"successful", false, true, http.StatusOK, http.StatusBadRequest},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := a(t, Settings{Limiter: NewLimiter(t, rdb, slidelimit.Per(3, time.Minute)), RefundFailed: tt.failed, RefundSuccessful: tt.succ})
			if got := Send(t, srv, 6, Request{Peer: peer4, Path: "/a", Status: tt.free}); !slices.Equal(got, Statuses(6, tt.free)) {
				t.Errorf("refunded requests = %v, want all answered %d", got, tt.free)
			}
			if got, want := Send(t, srv, 4, Request{Peer: peer4, Path: "/a", Status: tt.counting}), Statuses(3, tt.counting, http.StatusTooManyRequests); !slices.Equal(got, want) {
				t.Errorf("counted requests after them = %v, want %v", got, want)
			}
		})
	}
}

// skip checks that skipped requests are neither counted nor given fields.
func skip(t *testing.T, a Adapter) {
	srv := a(t, Settings{Limiter: NewLimiter(t, redistest.Client(t), slidelimit.Per(2, time.Minute)), SkipPath: "/healthz"})
	for i := range 5 {
		r := get(t, srv, "/healthz")
		if r.Status != http.StatusOK {
			t.Errorf("skipped request %d = %d, want 200", i+1, r.Status)
		}
		noQuotaFields(t, "skipped request", r)
	}
	if got, want := Send(t, srv, 3, Request{Peer: peer4, Path: "/a"}), Statuses(2, http.StatusOK, http.StatusTooManyRequests); !slices.Equal(got, want) {
		t.Errorf("limited requests after skipped ones = %v, want %v", got, want)
	}
}

// limiterChoice gives /b a limiter of its own: each path has its own
// quota and names its own policy.
func limiterChoice(t *testing.T, a Adapter) {
	rdb := redistest.Client(t)
	srv := a(t, Settings{
		Limiter:  NewLimiter(t, rdb, slidelimit.Per(3, time.Minute)),
		Limiters: map[string]*slidelimit.Limiter{"/b": NewLimiter(t, rdb, slidelimit.Per(1, time.Minute).Named("b"))},
	})
	for _, tt := range []struct {
		path   string
		quota  int
		policy string
	}{{"/a", 3, `"3/1m"`}, {"/b", 1, `"b"`}} {
		for i := range tt.quota + 1 {
			r := get(t, srv, tt.path)
			if want := map[bool]int{true: http.StatusOK, false: http.StatusTooManyRequests}[i < tt.quota]; r.Status != want {
				t.Errorf("%s request %d = %d, want %d", tt.path, i+1, r.Status, want)
			}
			if p := r.Header.Get(slidelimit.FieldRateLimitPolicy); !strings.HasPrefix(p, tt.policy+";") {
				t.Errorf("%s request %d: RateLimit-Policy %q, want policy %s", tt.path, i+1, p, tt.policy)
			}
		}
	}
}

// cost checks requests that take several units, and a cost beyond the
// quota, which is the server's error.
func cost(t *testing.T, a Adapter) {
	var errs ErrorLog
	srv := a(t, Settings{Limiter: NewLimiter(t, redistest.Client(t), slidelimit.Per(10, time.Minute)), CostHeader: "X-Cost", Hook: errs.Hook})
	for i, tt := range []struct {
		cost, status int
		remaining    string
	}{{4, http.StatusOK, "6"}, {4, http.StatusOK, "2"}, {4, http.StatusTooManyRequests, "2"}, {2, http.StatusOK, "0"}} {
		r := get(t, srv, "/a", "X-Cost", strconv.Itoa(tt.cost))
		if r.Status != tt.status || r.Header.Get(slidelimit.FieldXRateLimitRemaining) != tt.remaining {
			t.Errorf("request %d of cost %d = %d with remaining %q, want %d with %q", i+1, tt.cost, r.Status,
				r.Header.Get(slidelimit.FieldXRateLimitRemaining), tt.status, tt.remaining)
		}
	}
	serverError(t, srv, &errs, "request of cost 11 against a quota of 10", slidelimit.ErrInvalidCost, "X-Cost", "11")
}

// serverError checks that the hook behind errs has received nothing so
// far, then sends a request with the given header fields, which srv must
// answer 500, reporting one error that wraps target to the hook.
func serverError(t *testing.T, srv Server, errs *ErrorLog, what string, target error, header ...string) {
	t.Helper()
	if e := errs.Take(); len(e) != 0 {
		t.Errorf("hook got %v before the %s, want nothing", e, what)
	}
	if r := get(t, srv, "/a", header...); r.Status != http.StatusInternalServerError {
		t.Errorf("%s = %d, want 500", what, r.Status)
	}
	if e := errs.Take(); len(e) != 1 || !errors.Is(e[0], target) {
		t.Errorf("%s: hook got %v, want one error wrapping %v", what, e, target)
	}
}

// plans holds requests of one identity to limits of their own, as a
// tenant's plan read from each request: each plan counts what the others
// admitted, and an invalid plan is the server's error.
func plans(t *testing.T, a Adapter) {
	var errs ErrorLog
	srv := a(t, Settings{Limiter: NewLimiter(t, redistest.Client(t), slidelimit.Per(10, time.Minute)), PlanHeader: "X-Plan", Hook: errs.Hook})
	for i, tt := range []struct {
		plan          string
		status        int
		limit, remain string
	}{
		{"3", http.StatusOK, "3", "2"}, {"3", http.StatusOK, "3", "1"}, {"3", http.StatusOK, "3", "0"},
		{"3", http.StatusTooManyRequests, "3", "0"},
		// Raised: the three already admitted count.
		{"5", http.StatusOK, "5", "1"}, {"5", http.StatusOK, "5", "0"}, {"5", http.StatusTooManyRequests, "5", "0"},
		// No plan: the limiter's own limit, 10, counts the same five.
		{"", http.StatusOK, "10", "4"},
		// Lowered below what was admitted.
		{"4", http.StatusTooManyRequests, "4", "0"},
	} {
		var r Response
		if tt.plan == "" {
			r = get(t, srv, "/a")
		} else {
			r = get(t, srv, "/a", "X-Plan", tt.plan)
		}
		if r.Status != tt.status || r.Header.Get(slidelimit.FieldXRateLimitLimit) != tt.limit ||
			r.Header.Get(slidelimit.FieldXRateLimitRemaining) != tt.remain {
			t.Errorf("request %d, plan %q = %d with limit %q and remaining %q, want %d with %q and %q", i+1, tt.plan, r.Status,
				r.Header.Get(slidelimit.FieldXRateLimitLimit), r.Header.Get(slidelimit.FieldXRateLimitRemaining), tt.status, tt.limit, tt.remain)
		}
	}
	serverError(t, srv, &errs, "request with an invalid plan", slidelimit.ErrInvalidLimit, "X-Plan", "none")
}

// clientIP runs every scenario of redistest.ClientIPScenarios and the
// hostile forwarding headers of hostileForwarding.
func clientIP(t *testing.T, a Adapter) {
	rdb := redistest.Client(t)
	for _, sc := range append(redistest.ClientIPScenarios(), hostileForwarding()...) {
		t.Run(sc.Name, func(t *testing.T) {
			srv := a(t, Settings{
				Limiter:  NewLimiter(t, rdb, slidelimit.Per(redistest.ClientIPLimit, time.Minute)),
				ClientIP: slidelimit.ClientIP{TrustedProxies: sc.TrustedProxies, Header: sc.Header},
			})
			sc.Check(t, serveScenario(t, srv, sc))
		})
	}
}

// serveScenario sends the requests of sc, each from peer4 or, every other
// one, from peer6, and counts the admitted ones by client.
func serveScenario(t *testing.T, srv Server, sc redistest.ClientIPScenario) map[string]int {
	t.Helper()
	admitted := map[string]int{}
	for i, req := range sc.Requests {
		h := http.Header{}
		for _, f := range req.Header {
			h.Add(f[0], f[1])
		}
		// Every other request comes over IPv6 when both peers are
		// trusted; otherwise all come from one peer, whose quota an
		// untrusted one's requests share.
		p := peer4
		if trusted := slidelimit.TrustedProxies(sc.TrustedProxies); i%2 == 1 && trusted.Contains(peer4) && trusted.Contains(peer6) {
			p = peer6
		}
		switch r := srv(t, Request{Peer: p, Path: "/a", Header: h}); r.Status {
		case http.StatusOK:
			admitted[req.Client]++
		case http.StatusTooManyRequests:
		default:
			t.Errorf("%s: request %d = %d, want 200 or 429", sc.Name, i+1, r.Status)
		}
	}
	return admitted
}

// hostileForwarding returns client-IP scenarios whose forwarding headers
// are garbage or huge: from a trusted peer, the client is the last
// address trusted hops vouch for, and a request is never an error.
func hostileForwarding() []redistest.ClientIPScenario {
	trusted := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	long := strings.Repeat("10.9.9.9, ", 10000) + "198.51.100.200"
	var reqs []redistest.ClientIPRequest
	for i := range 4 * redistest.ClientIPLimit {
		hops := []string{
			"not-an-address, 198.51.100.200",
			"[::1%25zone]:x, 198.51.100.200",
			"198.51.100.200, , ,",
			long,
		}
		reqs = append(reqs, redistest.ClientIPRequest{Client: "198.51.100.200", Header: [][2]string{{"X-Forwarded-For", hops[i%len(hops)]}}})
	}
	var garbage []redistest.ClientIPRequest
	for i := range 4 * redistest.ClientIPLimit {
		garbage = append(garbage, redistest.ClientIPRequest{Client: "peer", Header: [][2]string{
			{"Forwarded", []string{"for=unknown", `for="_hidden"`, "for=;;;", "by=1.2.3.4", strings.Repeat("for=", 5000)}[i%5]},
		}})
	}
	var v6 []redistest.ClientIPRequest
	for i := range 2 * redistest.ClientIPLimit {
		v6 = append(v6, redistest.ClientIPRequest{Client: "2001:db8:1::/64", Header: [][2]string{{"X-Forwarded-For", fmt.Sprintf("2001:db8:1::%x", i+1)}}})
		v6 = append(v6, redistest.ClientIPRequest{Client: "2001:db8:2::/64", Header: [][2]string{{"X-Forwarded-For", fmt.Sprintf("2001:db8:2::%x", i+1)}}})
	}
	return []redistest.ClientIPScenario{
		{Name: "IPv6 clients grouped by /64", TrustedProxies: trusted, Requests: v6,
			Want: map[string]int{"2001:db8:1::/64": redistest.ClientIPLimit, "2001:db8:2::/64": redistest.ClientIPLimit}},
		{Name: "hostile X-Forwarded-For hops", TrustedProxies: trusted, Requests: reqs, Want: map[string]int{"198.51.100.200": redistest.ClientIPLimit}},
		{Name: "Forwarded naming no address", TrustedProxies: trusted[:1], Header: "Forwarded", Requests: garbage, Want: map[string]int{"peer": redistest.ClientIPLimit}},
	}
}

// hostileKeys keys requests by an API key of any content: each has its
// own quota, none is an error, and a request without one is refused, any
// error it reports wrapping slidelimit.ErrInvalidKey.
func hostileKeys(t *testing.T, a Adapter) {
	var errs ErrorLog
	srv := a(t, Settings{Limiter: NewLimiter(t, redistest.Client(t), slidelimit.Per(2, time.Minute)), KeyHeader: "X-Api-Key", Hook: errs.Hook})
	keys := []string{"a", "A", "{a}", "}{", "a|b", `a\|b`, "a:b", "*", "..", "%00", "ключ", "with space", strings.Repeat("k", 8<<10), "a\tb"}
	for _, key := range keys {
		got := Send(t, srv, 3, Request{Peer: peer4, Path: "/a", Header: http.Header{"X-Api-Key": {key}}})
		if want := Statuses(2, http.StatusOK, http.StatusTooManyRequests); !slices.Equal(got, want) {
			t.Errorf("requests with key %.20q = %v, want %v", key, got, want)
		}
	}
	if e := errs.Take(); len(e) != 0 {
		t.Errorf("hook got %v, want nothing", e)
	}
	for range 3 {
		if r := get(t, srv, "/a"); r.Status < 400 || r.Status == http.StatusTooManyRequests || r.Status == http.StatusServiceUnavailable {
			t.Errorf("request without a key = %d, want it refused as undecidable", r.Status)
		}
	}
	// An adapter may leave a caller's missing identity unreported (gRPC
	// does: it is the caller's to fix); what it reports must say what it is.
	e := errs.Take()
	if len(e) > 3 {
		t.Errorf("hook got %d errors for 3 requests without a key, want at most 3: %v", len(e), e)
	}
	for _, err := range e {
		if !errors.Is(err, slidelimit.ErrInvalidKey) {
			t.Errorf("hook got %v for a request without a key, want an error wrapping ErrInvalidKey", err)
		}
	}
}
