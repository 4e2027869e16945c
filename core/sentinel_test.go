package slidelimit_test

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// TestSentinelFailover runs a limiter on a Sentinel-managed primary, fails
// over to the replica mid-window, and checks the count carries over exactly
// and the script is reloaded on the new primary, which never saw it.
func TestSentinelFailover(t *testing.T) {
	primary := redistest.StartServer(t)
	host, port, _ := strings.Cut(primary.Addr, ":")
	replica := redistest.StartServer(t, "--replicaof", host, port)
	sentinel := redistest.StartSentinel(t, "primary", primary.Addr)

	rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "primary", SentinelAddrs: []string{sentinel.Addr}})
	t.Cleanup(func() { _ = rdb.Close() })
	lim, _ := newLimiter(t, rdb, slidelimit.PerMinute(5))
	for i := range 3 {
		if res := allow(t, lim, "s"); !res.Allowed {
			t.Fatalf("Allow #%d before failover = %+v, want allowed", i+1, res)
		}
	}

	ctx := t.Context()
	direct := redis.NewClient(&redis.Options{Addr: primary.Addr})
	t.Cleanup(func() { _ = direct.Close() })
	// The replica's first sync may start only after the primary's
	// repl-diskless-sync-delay (5 s by default) and take longer on a busy
	// host: WAIT until it acknowledges the writes, within 30 s.
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := direct.Wait(ctx, 1, time.Second).Result()
		if err == nil && n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("WAIT for the replica = %d, %v, want 1 within 30s", n, err)
		}
	}
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel.Addr})
	t.Cleanup(func() { _ = sc.Close() })
	deadline = time.Now().Add(20 * time.Second)
	for {
		// The sentinel needs a moment to discover the replica before it
		// can promote it; until then FAILOVER answers an error.
		if err := sc.Failover(ctx, "primary").Err(); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("SENTINEL FAILOVER kept failing for 20s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	for {
		addr, err := sc.GetMasterAddrByName(ctx, "primary").Result()
		if err == nil && strings.Join(addr, ":") == replica.Addr {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica %s was not promoted within 20s (sentinel says %v, %v)", replica.Addr, addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// The first calls may still reach the old primary, now read-only, or
	// fail while the client switches over; they must never be admitted
	// twice. Poll until the new primary decides.
	var res slidelimit.Result
	for {
		var err error
		res, err = lim.Allow(ctx, "s")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no decision from the new primary: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !res.Allowed || res.Remaining != 1 {
		t.Fatalf("first Allow after failover = %+v, want allowed with 1 remaining: the count must carry over", res)
	}
	if res := allow(t, lim, "s"); !res.Allowed || res.Remaining != 0 {
		t.Fatalf("fifth request = %+v, want allowed with 0 remaining", res)
	}
	if res := allow(t, lim, "s"); res.Allowed {
		t.Fatalf("sixth request = %+v, want denied", res)
	}
}
