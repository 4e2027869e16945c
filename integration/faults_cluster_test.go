package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// nodeCloseBound is how long go-redis may take to close the client of a
// node that left the cluster: it does so a minute after the first slot
// map without the node (clusterNodes.GC, run by a timer that every new
// cluster state starts), and nothing shorter can be asked of it.
const nodeCloseBound = 90 * time.Second

// TestClusterNodeLeaves empties a primary of a Redis Cluster of its own
// (its slots resharded to another primary with redis-cli --cluster
// reshard), removes it (redis-cli --cluster del-node), waits until go-redis
// closes its client of that node, and then adds it back (add-node, and a
// reshard of as many slots onto it), while goroutines keep deciding through
// the user's ClusterClient, with two busy loops beside them. The primary is
// the one the limiter used first. After each step a burst on fresh
// identities must be decided by Redis alone and exactly; the times are
// printed. Every fallback is the policy's, nothing panics and no
// goroutine outlives the test.
func TestClusterNodeLeaves(t *testing.T) {
	leakCheck(t)
	busyLoops(t, 2, 5*time.Minute)
	nodes := startCluster(t)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: clusterAddrs(nodes)})
	t.Cleanup(func() { _ = rdb.Close() })
	prefix := redistest.Prefix(t)
	lim := newLimiter(t, rdb, prefix, faultLimit, slidelimit.WithDenyCache(0))
	awaitRedisDecision(t, lim, "warm-up")

	// The victim serves the warm-up identity: the limiter's first node.
	key, err := slidelimit.Key(prefix, "warm-up", faultLimit)
	if err != nil {
		t.Fatal(err)
	}
	victimClient, err := rdb.MasterForKey(t.Context(), key)
	if err != nil {
		t.Fatalf("MasterForKey(%q): %v", key, err)
	}
	victim := victimClient.Options().Addr
	ns, err := clusterNodes(t.Context(), victim)
	if err != nil {
		t.Fatalf("CLUSTER NODES on %s: %v", victim, err)
	}
	var victimNode, target clusterNode
	for _, n := range ns {
		switch {
		case n.addr == victim:
			victimNode = n
		case n.is("master") && n.slots > 0 && target.id == "":
			target = n
		}
	}
	seed := target.addr
	victimAdmin := adminClient(t, victim)
	conf, err := victimAdmin.ConfigGet(t.Context(), "cluster-config-file").Result()
	if err != nil {
		t.Fatalf("CONFIG GET cluster-config-file on %s: %v", victim, err)
	}

	ids := identities("leave-", 24)
	for _, id := range ids {
		awaitRedisDecision(t, lim, id)
	}
	tr := startTraffic(lim, 4, ids)
	t.Cleanup(func() { tr.stop() }) // if the test ends early
	time.Sleep(300 * time.Millisecond)

	// Leave: reshard every slot away, then remove the empty node.
	start := time.Now()
	redisCLI(t, "--cluster", "reshard", seed, "--cluster-from", victimNode.id, "--cluster-to", target.id,
		"--cluster-slots", strconv.Itoa(victimNode.slots), "--cluster-yes")
	resharded := time.Now()
	redisCLI(t, "--cluster", "del-node", seed, victimNode.id)
	gone := time.Now()
	rdb.ReloadState(t.Context())
	exactGone := awaitExact(t, lim, "gone-", gone)
	t.Logf("node %s left: reshard of its %d slots %v, del-node %v; exact again %v after it was gone",
		victim, victimNode.slots, resharded.Sub(start).Round(time.Millisecond), gone.Sub(resharded).Round(time.Millisecond),
		exactGone.Round(time.Millisecond))

	// go-redis closes its client of the departed node a minute after the
	// first slot map without it; until then it may still hand it out.
	deadline := time.Now().Add(nodeCloseBound)
	for !errors.Is(victimClient.Ping(t.Context()).Err(), redis.ErrClosed) {
		if time.Now().After(deadline) {
			t.Fatalf("go-redis did not close its client of the departed node %s within %v", victim, nodeCloseBound)
		}
		time.Sleep(100 * time.Millisecond)
	}
	closed := time.Now()
	exactClosed := awaitExact(t, lim, "closed-", closed)
	t.Logf("go-redis closed its client of %s %v after it was gone; exact again %v after the close",
		victim, closed.Sub(gone).Round(time.Second), exactClosed.Round(time.Millisecond))

	// Back: the same address as a new, empty node, given as many slots.
	if victimAdmin.Ping(t.Context()).Err() == nil {
		mustDo(t, victimAdmin, "FLUSHALL")
		mustDo(t, victimAdmin, "CLUSTER", "RESET", "HARD")
	} else { // del-node shut it down: start it again with a new identity
		if err := os.Remove(conf[`cluster-config-file`]); err != nil {
			t.Fatalf("remove %s: %v", conf[`cluster-config-file`], err)
		}
		nodes[victim].Restart()
	}
	redisCLI(t, "--cluster", "add-node", victim, seed)
	var newID string
	awaitPoll(t, "the returned node to join", func(ctx context.Context) bool {
		ns, err := clusterNodes(ctx, seed)
		for _, n := range ns {
			if err == nil && n.addr == victim && n.is("master") && !n.is("handshake") {
				newID = n.id
				return true
			}
		}
		return false
	})
	for addr := range nodes {
		if addr == victim {
			continue
		}
		awaitPoll(t, addr+" to know the returned node", func(ctx context.Context) bool {
			ns, err := clusterNodes(ctx, addr)
			for _, n := range ns {
				if err == nil && n.id == newID && !n.is("handshake") && !n.is("noaddr") {
					return true
				}
			}
			return false
		})
	}
	redisCLI(t, "--cluster", "reshard", seed, "--cluster-from", target.id, "--cluster-to", newID,
		"--cluster-slots", strconv.Itoa(victimNode.slots), "--cluster-yes")
	back := time.Now()
	rdb.ReloadState(t.Context())
	exactBack := awaitExactOn(t, lim, func(attempt int) []string {
		return identitiesOn(t, victimAdmin, prefix, fmt.Sprintf("back-%d-", attempt), 4)
	}, back)

	ds := tr.stop()
	tally := judgeFallbacks(t, slidelimit.FailOpen, ds, back)
	t.Logf("node %s back and given %d slots: exact on them %v later; %d decisions in all, %d fallbacks",
		victim, victimNode.slots, exactBack.Round(time.Millisecond), len(ds), tally.fallbacks)
}

// identitiesOn returns n identities named prefix followed by a number
// whose keys under the limiter's prefix lie in slots that node serves.
func identitiesOn(t *testing.T, node *redis.Client, limPrefix, prefix string, n int) []string {
	t.Helper()
	var ids []string
	for i := 0; len(ids) < n; i++ {
		if i == 10000 {
			t.Fatalf("no %d of 10000 identities lie on %s", n, node.Options().Addr)
		}
		id := prefix + strconv.Itoa(i)
		key, err := slidelimit.Key(limPrefix, id, faultLimit)
		if err != nil {
			t.Fatal(err)
		}
		// A node answers for a key only in a slot it serves; MOVED
		// otherwise.
		if node.Exists(t.Context(), key).Err() == nil {
			ids = append(ids, id)
		}
	}
	return ids
}

// redisCLI runs redis-cli with args and fails the test if it fails.
func redisCLI(t *testing.T, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}
