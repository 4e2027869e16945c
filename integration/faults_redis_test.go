package integration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// exactBound is how long after a fault ends a burst on fresh identities may
// take to be decided by Redis alone, and exactly.
const exactBound = 30 * time.Second

// redisFault is a way a real Redis process refuses to serve, reached
// through the user's go-redis client.
type redisFault struct {
	name string
	// reply is the start of the error Redis answers while the fault lasts;
	// some decision's error must show it. "" for a fault with no reply of
	// its own (a dropped connection says nothing).
	reply string
	// opens says that the circuit breaker must open: Redis cannot serve,
	// and asking it again at once only adds load and latency.
	opens bool
	// mayPass says that the fault need not make any decision fall back:
	// go-redis may retry it away.
	mayPass bool
	// harmless says that no decision may fall back: Redis still decides.
	harmless bool
	// closes says that the fault closes the client for good, so that no
	// decision comes from Redis after it and nothing recovers.
	closes bool
	// setup starts the fault's servers and returns the limiter's client
	// and inject, which starts the fault once it has taken effect and
	// returns the function that ends it.
	setup func(t *testing.T) (rdb *redis.Client, inject func() (end func()))
}

// redisFaults is every fault of TestRedisFaults.
var redisFaults = []redisFault{
	{name: "READONLY (demoted primary)", reply: "READONLY", opens: true, setup: func(t *testing.T) (*redis.Client, func() func()) {
		primary, other := redistest.StartServer(t), redistest.StartServer(t)
		admin := adminClient(t, primary.Addr)
		return appClient(t, primary.Addr, nil), func() func() {
			host, port, _ := net.SplitHostPort(other.Addr)
			mustDo(t, admin, "REPLICAOF", host, port)
			return func() { mustDo(t, admin, "REPLICAOF", "NO", "ONE") }
		}
	}},
	{name: "MASTERDOWN (stale replica)", reply: "MASTERDOWN", opens: true, setup: func(t *testing.T) (*redis.Client, func() func()) {
		// The primary starts a full sync at once when the replica
		// reconnects, not 5 s later (the default delay).
		primary := redistest.StartServer(t, "--repl-diskless-sync-delay", "0")
		host, port, _ := net.SplitHostPort(primary.Addr)
		// A writable replica that refuses to serve while its link to the
		// primary is down.
		replica := redistest.StartServer(t, "--replicaof", host, port,
			"--replica-read-only", "no", "--replica-serve-stale-data", "no")
		awaitReplicaLink(t, replica.Addr)
		return appClient(t, replica.Addr, nil), func() func() {
			primary.Stop()
			return primary.Restart
		}
	}},
	{name: "LOADING (restart with a big RDB)", reply: "LOADING", opens: true, setup: func(t *testing.T) (*redis.Client, func() func()) {
		// key-load-delay (a debugging setting of redis-server) sleeps that
		// many microseconds per key loaded, and a small
		// loading-process-events-interval-bytes makes Redis answer LOADING
		// between keys, so a restart stays in LOADING for seconds.
		srv := redistest.StartServer(t, "--enable-debug-command", "yes", "--dir", t.TempDir(), "--dbfilename", "big.rdb",
			"--key-load-delay", "50", "--loading-process-events-interval-bytes", "1024")
		admin := adminClient(t, srv.Addr)
		mustDo(t, admin, "DEBUG", "POPULATE", "60000", "filler")
		mustDo(t, admin, "SAVE")
		return appClient(t, srv.Addr, nil), func() func() {
			srv.Stop()
			restarted := make(chan struct{})
			go func() { defer close(restarted); srv.Restart() }() // returns once loaded
			awaitReply(t, admin, "LOADING")
			return func() { <-restarted }
		}
	}},
	{name: "BUSY (a long script)", reply: "BUSY", opens: true, setup: func(t *testing.T) (*redis.Client, func() func()) {
		srv := redistest.StartServer(t, "--busy-reply-threshold", "50")
		admin := adminClient(t, srv.Addr)
		return appClient(t, srv.Addr, nil), func() func() {
			done := make(chan error, 1)
			go func() {
				c := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: faultDuration + 10*time.Second})
				defer c.Close()
				done <- c.Eval(context.Background(), busyScript, nil, faultDuration.Microseconds()).Err()
			}()
			awaitReply(t, admin, "BUSY")
			return func() {
				if err := <-done; err != nil {
					t.Errorf("the long script: %v", err)
				}
			}
		}
	}},
	// Redis refuses a write command past maxmemory, but not one of a
	// script that has already written: the script must finish. allow.lua
	// writes first (ZREMRANGEBYSCORE), so Redis keeps deciding, exactly,
	// and its memory grows past maxmemory.
	{name: "OOM (maxmemory, noeviction)", harmless: true, setup: func(t *testing.T) (*redis.Client, func() func()) {
		srv := redistest.StartServer(t, "--maxmemory-policy", "noeviction")
		admin := adminClient(t, srv.Addr)
		return appClient(t, srv.Addr, nil), func() func() {
			mustDo(t, admin, "CONFIG", "SET", "maxmemory", "1")
			if err := admin.ZAdd(t.Context(), "oom-probe", redis.Z{Member: "x"}).Err(); err == nil || !strings.HasPrefix(err.Error(), "OOM") {
				t.Errorf("ZADD past maxmemory = %v, want OOM", err)
			}
			return func() { mustDo(t, admin, "CONFIG", "SET", "maxmemory", "0") }
		}
	}},
	{name: "NOPERM (no scripting for the user)", reply: "NOPERM", opens: true, setup: func(t *testing.T) (*redis.Client, func() func()) {
		srv, admin := aclServer(t)
		return appClient(t, srv.Addr, appUser), func() func() {
			mustDo(t, admin, "ACL", "SETUSER", appUser.name, "-@scripting")
			return func() { mustDo(t, admin, "ACL", "SETUSER", appUser.name, "+@all") }
		}
	}},
	{name: "wrong password", reply: "WRONGPASS", opens: true, setup: func(t *testing.T) (*redis.Client, func() func()) {
		srv, admin := aclServer(t)
		return appClient(t, srv.Addr, appUser), func() func() {
			changePassword(t, admin)
			return func() { mustDo(t, admin, "ACL", "SETUSER", appUser.name, "resetpass", ">"+appUser.password) }
		}
	}},
	{name: "CLIENT KILL under traffic", mayPass: true, setup: func(t *testing.T) (*redis.Client, func() func()) {
		srv := redistest.StartServer(t)
		admin := adminClient(t, srv.Addr)
		return appClient(t, srv.Addr, nil), func() func() {
			return every(10*time.Millisecond, func(ctx context.Context) {
				_ = admin.Do(ctx, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Err()
			})
		}
	}},
	{name: "Sentinel failover", opens: true, setup: func(t *testing.T) (*redis.Client, func() func()) {
		primary := redistest.StartServer(t)
		host, port, _ := net.SplitHostPort(primary.Addr)
		replica := redistest.StartServer(t, "--replicaof", host, port)
		awaitReplicaLink(t, replica.Addr)
		sentinel := redistest.StartSentinel(t, "mymaster", primary.Addr)
		sadmin := adminClient(t, sentinel.Addr)
		awaitPoll(t, "the sentinel to see the replica", func(ctx context.Context) bool {
			rs, _ := sadmin.Do(ctx, "SENTINEL", "REPLICAS", "mymaster").Slice()
			return len(rs) > 0
		})
		rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "mymaster", SentinelAddrs: []string{sentinel.Addr}})
		t.Cleanup(func() { _ = rdb.Close() })
		return rdb, func() func() {
			primary.Stop()
			return func() {
				awaitPoll(t, "the sentinel to promote the replica", func(ctx context.Context) bool {
					addr, _ := sadmin.Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", "mymaster").StringSlice()
					return len(addr) == 2 && net.JoinHostPort(addr[0], addr[1]) == replica.Addr
				})
			}
		}
	}},
	{name: "the user's Close under traffic", reply: redis.ErrClosed.Error(), closes: true, setup: func(t *testing.T) (*redis.Client, func() func()) {
		srv := redistest.StartServer(t)
		rdb := appClient(t, srv.Addr, nil)
		return rdb, func() func() {
			if err := rdb.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			return func() {}
		}
	}},
}

// busyScript spins for ARGV[1] microseconds of Redis time.
const busyScript = `
local t0 = redis.call('TIME')
while true do
	local t = redis.call('TIME')
	if (t[1] - t0[1]) * 1000000 + (t[2] - t0[2]) >= tonumber(ARGV[1]) then return 1 end
end`

// TestRedisFaults makes a real Redis refuse to serve in each way it can
// (READONLY, MASTERDOWN, LOADING, BUSY, NOPERM, a wrong password, killed
// connections, a Sentinel failover, the user closing the client; and OOM,
// which Redis lets allow.lua through) while three limiters, one per
// FailurePolicy, keep deciding from 18 goroutines through the user's
// go-redis client, with two busy loops beside them. For every fault it checks that nothing panics; that every
// decision Redis could not make is the policy's, with an error wrapping
// ErrUnavailable; that the fault bit, with its own reply; that the circuit
// breaker opened where Redis cannot serve; that after the fault a burst on
// fresh identities is decided by Redis alone and exactly (the time that
// took is printed); and that no goroutine outlives the test.
func TestRedisFaults(t *testing.T) {
	long(t)
	leakCheck(t)
	busyLoops(t, 2, 10*time.Minute)
	for _, f := range redisFaults {
		t.Run(f.name, func(t *testing.T) { runRedisFault(t, f) })
	}
}

func runRedisFault(t *testing.T, f redisFault) {
	rdb, inject := f.setup(t)
	base := redistest.Prefix(t)
	base = base[max(0, len(base)-60):] // room for the policy's number, keeping the random tail
	lims := make([]*slidelimit.Limiter, len(allPolicies))
	prefixes := make([]string, len(allPolicies))
	for i, p := range allPolicies {
		prefixes[i] = fmt.Sprintf("%s%d:", base, i)
		lims[i] = newLimiter(t, rdb, prefixes[i], faultLimit, slidelimit.WithFailurePolicy(p), slidelimit.WithDenyCache(0))
		awaitRedisDecision(t, lims[i], "warm-up")
	}
	trs := make([]*traffic, len(lims))
	for i, lim := range lims {
		trs[i] = startTraffic(lim, 6, identities("f-", 6))
	}
	time.Sleep(300 * time.Millisecond)
	end := inject()
	injected := time.Now()
	time.Sleep(faultDuration)
	end()
	ended := time.Now()

	// Recovery: bursts on fresh identities until one is decided by Redis
	// alone, and exactly, under each policy at once, while the traffic
	// goes on.
	recovery := make([]string, len(lims))
	var wg sync.WaitGroup
	for i, lim := range lims {
		recovery[i] = "n/a"
		if f.closes {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			recovery[i] = awaitExact(t, lim, prefixes[i]+"exact-", ended).Round(time.Millisecond).String()
		}()
	}
	wg.Wait()

	replied := false
	for i, tr := range trs {
		ds := tr.stop()
		policy := allPolicies[i]
		tally := judgeFallbacks(t, policy, ds, ended)
		if f.harmless && tally.fallbacks > 0 {
			t.Errorf("%s: %d of %d decisions fell back, want 0: Redis still decides under this fault", policy, tally.fallbacks, len(ds))
		}
		if tally.during == 0 && !f.mayPass && !f.harmless {
			t.Errorf("%s: no decision fell back during the fault, want some: the fault did not bite", policy)
		}
		if f.opens && tally.open == 0 {
			t.Errorf("%s: no decision was made with the circuit breaker open, want the breaker to open while Redis cannot serve", policy)
		}
		for _, d := range ds {
			if d.err != nil && f.reply != "" && strings.Contains(d.err.Error(), f.reply) {
				replied = true
			}
			if f.closes && d.start.After(injected) && !d.fallback {
				t.Errorf("%s: Allow(%q) after Close = a decision from Redis, want the policy's", policy, d.identity)
			}
		}
		t.Logf("%s/%s: %d decisions, %d fallbacks (%d during the fault), %d with the breaker open; exact again %s after the fault ended",
			f.name, policy, len(ds), tally.fallbacks, tally.during, tally.open, recovery[i])
	}
	if f.reply != "" && !replied {
		t.Errorf("no decision's error showed %q, want Redis's reply to reach the caller wrapped", f.reply)
	}
}

// awaitExact sends bursts of concurrent calls on 4 fresh identities under
// prefix until one is decided by Redis alone, and returns how long after
// since it started. A burst Redis decided alone must admit exactly the
// quota of each identity. It fails the test after exactBound.
func awaitExact(t *testing.T, lim *slidelimit.Limiter, prefix string, since time.Time) time.Duration {
	t.Helper()
	return awaitExactOn(t, lim, func(attempt int) []string { return identities(fmt.Sprintf("%s%d-", prefix, attempt), 4) }, since)
}

// awaitExactOn is awaitExact on the identities fresh returns for each
// attempt, which must not repeat.
func awaitExactOn(t *testing.T, lim *slidelimit.Limiter, fresh func(attempt int) []string, since time.Time) time.Duration {
	t.Helper()
	const calls = 2 * faultQuota
	for attempt := 0; ; attempt++ {
		start := time.Now()
		ids := fresh(attempt)
		b := burstIdentities(t.Context(), lim, ids, calls)
		if b.fallbacks == 0 {
			for i, got := range b.admitted {
				if got != faultQuota {
					t.Errorf("after the fault: identity %d admitted %d of %d concurrent calls, all decided by Redis, want exactly %d",
						i, got, calls, faultQuota)
				}
			}
			return start.Sub(since)
		}
		if time.Since(since) > exactBound {
			t.Errorf("%v after the fault ended, %d of %d calls on fresh identities still fell back; first error: %v",
				exactBound, b.fallbacks, len(ids)*calls, b.firstErr)
			return -1
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestWrongPasswordConnections changes the password of the user a
// limiter's go-redis client logs in as, so that every new connection fails
// its AUTH, and counts the connections the client opens for 200 calls. The
// circuit breaker must open, so that a Redis refusing the client is not
// dialled once per call; the count is printed.
func TestWrongPasswordConnections(t *testing.T) {
	leakCheck(t)
	busyLoops(t, 2, 2*time.Minute)
	srv, admin := aclServer(t)
	var dials atomic.Int64
	rdb := appClient(t, srv.Addr, appUser, func(o *redis.Options) {
		var d net.Dialer
		o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return d.DialContext(ctx, network, addr)
		}
	})
	lim := newLimiter(t, rdb, redistest.Prefix(t), faultLimit, slidelimit.WithDenyCache(0))
	awaitRedisDecision(t, lim, "warm-up")

	changePassword(t, admin)
	const calls = 200
	before := dials.Load()
	var open, fallbacks int
	var firstErr error
	for i := range calls {
		res, err := lim.Allow(t.Context(), fmt.Sprintf("id-%d", i%8))
		if !res.Fallback || !errors.Is(err, slidelimit.ErrUnavailable) {
			t.Errorf("Allow with a wrong password = %+v, %v; want a fallback wrapping ErrUnavailable", res, err)
		}
		if res.Fallback {
			fallbacks++
		}
		if errors.Is(err, slidelimit.ErrCircuitOpen) {
			open++
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	opened := dials.Load() - before
	t.Logf("wrong password: %d calls opened %d connections; %d fell back, %d with the breaker open; first error: %v",
		calls, opened, fallbacks, open, firstErr)
	if open == 0 {
		t.Errorf("no call of %d was made with the circuit breaker open, want it to open when every connection fails its AUTH", calls)
	}
	if opened >= calls/4 {
		t.Errorf("%d calls opened %d connections, want fewer than %d: a failed AUTH must count as a failure", calls, opened, calls/4)
	}

	mustDo(t, admin, "ACL", "SETUSER", appUser.name, "resetpass", ">"+appUser.password)
	since := time.Now()
	t.Logf("wrong password: exact again %v after the password was restored",
		awaitExact(t, lim, "exact-", since).Round(time.Millisecond))
}

// user is an ACL user of a test's Redis.
type user struct{ name, password string }

// appUser is the user a limiter's client logs in as in aclServer.
var appUser = &user{name: "app", password: "s3cret"}

// aclServer starts a Redis with appUser allowed everything, and returns it
// with an admin client (the default user).
func aclServer(t *testing.T) (*redistest.Server, *redis.Client) {
	t.Helper()
	srv := redistest.StartServer(t)
	admin := adminClient(t, srv.Addr)
	mustDo(t, admin, "ACL", "SETUSER", appUser.name, "on", ">"+appUser.password, "~*", "&*", "+@all")
	return srv, admin
}

// changePassword gives appUser another password and drops its connections,
// so that every new one fails its AUTH with WRONGPASS.
func changePassword(t *testing.T, admin *redis.Client) {
	t.Helper()
	mustDo(t, admin, "ACL", "SETUSER", appUser.name, "resetpass", ">another")
	mustDo(t, admin, "CLIENT", "KILL", "USER", appUser.name)
}

// appClient returns the limiter's client of addr, logged in as u (nil for
// the default user), with go-redis's defaults otherwise, changed by each of
// opts. It is closed when the test ends.
func appClient(t *testing.T, addr string, u *user, opts ...func(*redis.Options)) *redis.Client {
	t.Helper()
	o := &redis.Options{Addr: addr}
	if u != nil {
		o.Username, o.Password = u.name, u.password
	}
	for _, opt := range opts {
		opt(o)
	}
	rdb := redis.NewClient(o)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// adminClient returns a client of addr that a fault uses to act on Redis.
// It is closed when the test ends.
func adminClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// mustDo runs a command on c and fails the test if Redis refuses it.
func mustDo(t *testing.T, c *redis.Client, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := c.Do(ctx, args...).Err(); err != nil {
		t.Fatalf("%v on %s: %v", args, c.Options().Addr, err)
	}
}

// awaitPoll polls cond until it holds, and fails the test after 30 s.
func awaitPoll(t *testing.T, what string, cond func(context.Context) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		ok := cond(ctx)
		cancel()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited 30s for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// awaitReply polls Redis with PING until it answers with an error that
// starts with prefix.
func awaitReply(t *testing.T, c *redis.Client, prefix string) {
	t.Helper()
	awaitPoll(t, "Redis to answer "+prefix, func(ctx context.Context) bool {
		err := c.Ping(ctx).Err()
		return err != nil && strings.HasPrefix(err.Error(), prefix)
	})
}

// awaitReplicaLink waits until the replica at addr is in sync with its
// primary.
func awaitReplicaLink(t *testing.T, addr string) {
	t.Helper()
	c := adminClient(t, addr)
	awaitPoll(t, "the replica "+addr+" to sync", func(ctx context.Context) bool {
		info, _ := c.Info(ctx, "replication").Result()
		return strings.Contains(info, "master_link_status:up")
	})
}

// every runs fn every interval until the returned function is called,
// which returns once fn has stopped.
func every(interval time.Duration, fn func(context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				fn(ctx)
			}
		}
	}()
	return func() { cancel(); wg.Wait() }
}
