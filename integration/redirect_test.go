package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
)

// TestClusterRedirects moves an identity's slot from one primary to
// another on a Redis Cluster of its own, as a resharding does, while a
// limiter keeps deciding for it: during the migration the old primary
// answers ASK for the identity's key, which it does not hold, and after it
// MOVED, before go-redis's slot map knows. Every decision must come from
// Redis, in the right place, and the count must stay exact. INFO errorstats
// shows that the redirections were met.
func TestClusterRedirects(t *testing.T) {
	nodes := startCluster(t, failoverNodeTimeout)
	ctx := t.Context()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: clusterAddrs(nodes)})
	t.Cleanup(func() { _ = rdb.Close() })
	const identity = "resharded"
	limit := slidelimit.PerMinute(100)
	lim, err := slidelimit.New(rdb, limit, slidelimit.WithPrefix("redirect:"), slidelimit.WithTimeout(5*time.Second), slidelimit.WithDenyCache(0))
	if err != nil {
		t.Fatal(err)
	}
	key, _ := slidelimit.Key("redirect:", identity, limit)
	slot, err := rdb.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	src, err := rdb.MasterForKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := clusterNodes(ctx, src.Options().Addr)
	if err != nil {
		t.Fatal(err)
	}
	var srcID, dstID, dstAddr string
	var primaries []string
	for _, n := range ns {
		if !n.is("master") {
			continue
		}
		primaries = append(primaries, n.addr)
		switch {
		case n.addr == src.Options().Addr:
			srcID = n.id
		case dstID == "":
			dstID, dstAddr = n.id, n.addr
		}
	}
	if srcID == "" || dstID == "" {
		t.Fatalf("no source and target primaries in %+v", ns)
	}
	admin := func(addr string) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	srcAdmin, dstAdmin := admin(src.Options().Addr), admin(dstAddr)

	decide := func(step string, remaining int) {
		t.Helper()
		res, err := lim.Allow(ctx, identity)
		if err != nil || !res.Allowed || res.Fallback || res.Remaining != remaining {
			t.Fatalf("%s: Allow = %+v, %v; want admitted by Redis with %d left", step, res, err, remaining)
		}
	}
	redirections := func(c *redis.Client) (asks, moves int) {
		info, err := c.Info(ctx, "errorstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info, "\n") {
			name, count, ok := strings.Cut(strings.TrimSpace(line), ":count=")
			if !ok {
				continue
			}
			n := 0
			for _, c := range count {
				if c < '0' || c > '9' {
					break
				}
				n = n*10 + int(c-'0')
			}
			switch name {
			case "errorstat_ASK":
				asks = n
			case "errorstat_MOVED":
				moves = n
			}
		}
		return asks, moves
	}

	// The migration begins before the key exists: the old primary answers
	// ASK, and the new one takes the key.
	if err := dstAdmin.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID).Err(); err != nil {
		t.Fatal(err)
	}
	if err := srcAdmin.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID).Err(); err != nil {
		t.Fatal(err)
	}
	decide("during the migration", 99)
	decide("during the migration, again", 98)
	var zcard *redis.IntCmd
	if _, err := dstAdmin.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Do(ctx, "ASKING") // the slot is only importing here
		zcard = p.ZCount(ctx, key, "0", "+inf")
		return nil
	}); err != nil || zcard.Val() != 2 {
		t.Errorf("ZCARD on the new primary during the migration = %d, %v; want 2", zcard.Val(), err)
	}
	if asks, _ := redirections(srcAdmin); asks == 0 {
		t.Error("the old primary answered no ASK: the migration was not met")
	}

	// The slot now belongs to the new primary; go-redis's map still names
	// the old one, which answers MOVED.
	for _, addr := range primaries {
		c := admin(addr)
		if err := c.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err(); err != nil {
			t.Fatalf("CLUSTER SETSLOT NODE on %s: %v", addr, err)
		}
	}
	decide("after the move", 97)
	decide("after the move, again", 96)
	if n, err := dstAdmin.ZCount(ctx, key, "0", "+inf").Result(); err != nil || n != 4 {
		t.Errorf("ZCARD on the new primary after the move = %d, %v; want 4", n, err)
	}
	asks, moves := redirections(srcAdmin)
	t.Logf("slot %d moved from %s to %s: the old primary answered %d ASK and %d MOVED", slot, src.Options().Addr, dstAddr, asks, moves)
	if moves == 0 {
		t.Error("the old primary answered no MOVED: the move was not met")
	}
}
