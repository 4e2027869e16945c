package integration

import (
	"context"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// failoverNodeTimeout is the test cluster's cluster-node-timeout, as in
// scripts/with-redis.sh.
const failoverNodeTimeout = 2 * time.Second

// TestClusterFailover SIGKILLs a primary of a Redis Cluster of its own (3
// primaries, 3 replicas, cluster-node-timeout 2000) while 32 goroutines keep
// deciding for identities spread over every shard, and waits for the
// primary's replica to be promoted. Decisions on the failed primary's slots
// must come from Redis again soon after the promotion (the target is 1 s;
// the time is printed), decisions on the healthy shards must never fall
// back, and afterwards every identity is limited exactly.
//
// The cluster runs with cluster-require-full-coverage no: with the default,
// yes, every node refuses every command (CLUSTERDOWN) from the moment the
// failed primary is marked failed until its replica is promoted, and no
// client can keep the healthy shards deciding.
//
// It never touches the harness's shared cluster.
func TestClusterFailover(t *testing.T) {
	long(t)
	leakCheck(t)
	nodes := startCluster(t, failoverNodeTimeout)

	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: clusterAddrs(nodes)})
	t.Cleanup(func() { _ = rdb.Close() })
	prefix := redistest.Prefix(t)
	// The deny cache is off, so that every decision asks Redis while its
	// primary fails and the failover is seen through the limiter's traffic.
	lim := newLimiter(t, rdb, prefix, faultLimit, slidelimit.WithDenyCache(0))

	// Identities on every shard; the victim is the primary of the first.
	ids := identities("fo-", 48)
	shardOf := map[string]string{}
	for _, id := range ids {
		key, err := slidelimit.Key(prefix, id, faultLimit)
		if err != nil {
			t.Fatal(err)
		}
		master, err := rdb.MasterForKey(t.Context(), key)
		if err != nil {
			t.Fatalf("MasterForKey(%q): %v", key, err)
		}
		shardOf[id] = master.Options().Addr
	}
	victim := shardOf[ids[0]]
	onVictim := map[string]bool{}
	for id, addr := range shardOf {
		if addr == victim {
			onVictim[id] = true
		}
	}
	for _, id := range ids {
		awaitRedisDecision(t, lim, id)
	}

	replica := replicaOf(t, victim)
	tr := startTraffic(lim, 32, ids)
	time.Sleep(500 * time.Millisecond)
	killed := time.Now()
	nodes[victim].Stop() // SIGKILL
	promoted := awaitPromotion(t, replica, 30*time.Second)
	recovered := tr.awaitRecovery(onVictim, promoted, 500*time.Millisecond, 20*time.Second)
	ds := tr.stop()

	var victimFallbacks, healthyFallbacks, healthy, slow int
	var firstHealthyErr error
	for _, d := range ds {
		switch {
		case onVictim[d.identity]:
			if d.fallback {
				victimFallbacks++
			}
		default:
			healthy++
			if d.fallback {
				healthyFallbacks++
				if firstHealthyErr == nil {
					firstHealthyErr = d.err
				}
			}
		}
		if d.latency > faultTimeout+latencyMargin {
			slow++
		}
	}
	if slow > 0 {
		t.Errorf("%d decisions took longer than the timeout %v + %v", slow, faultTimeout, latencyMargin)
	}
	figure := "never (within 20s)"
	if recovered >= 0 {
		figure = recovered.Round(time.Millisecond).String()
	}
	t.Logf("primary %s killed; replica %s promoted %v later; decisions on its slots from Redis again %s after the promotion; "+
		"%d decisions: %d fallbacks on the failed shard (%d identities), %d of %d on healthy shards",
		victim, replica, promoted.Sub(killed).Round(time.Millisecond), figure,
		len(ds), victimFallbacks, len(onVictim), healthyFallbacks, healthy)
	if recovered < 0 || recovered > recoveryBound {
		t.Errorf("decisions on the failed primary's slots came from Redis again %s after the promotion, want within %v (target 1s)", figure, recoveryBound)
	}
	if healthyFallbacks > 0 {
		t.Errorf("%d decisions on healthy shards fell back, want 0; first error: %v", healthyFallbacks, firstHealthyErr)
	}

	checkExact(t, lim, "fo-exact-", 12, 3*faultQuota, faultQuota)
}

// startCluster starts six redis-servers of a cluster of its own and joins
// them as 3 primaries with one replica each, with the given
// cluster-node-timeout; it returns them by address once every node reports
// the cluster ok and every replica is in sync.
func startCluster(t *testing.T, nodeTimeout time.Duration) map[string]*redistest.Server {
	t.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Fatalf("redis-cli is needed to create a cluster: %v", err)
	}
	dir := t.TempDir()
	nodes := map[string]*redistest.Server{}
	var addrs []string
	for i := range 6 {
		s := redistest.StartServer(t,
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes-"+strconv.Itoa(i)+".conf"),
			"--cluster-node-timeout", strconv.FormatInt(nodeTimeout.Milliseconds(), 10),
			"--cluster-port", strconv.Itoa(freePort(t)),
			"--cluster-require-full-coverage", "no")
		nodes[s.Addr] = s
		addrs = append(addrs, s.Addr)
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.CommandContext(t.Context(), "redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, addr := range addrs {
		c := redis.NewClient(&redis.Options{Addr: addr})
		for {
			info, _ := c.ClusterInfo(t.Context()).Result()
			repl, _ := c.Info(t.Context(), "replication").Result()
			if strings.Contains(info, "cluster_state:ok") &&
				(strings.Contains(repl, "role:master") || strings.Contains(repl, "master_link_status:up")) {
				break
			}
			if time.Now().After(deadline) {
				_ = c.Close()
				t.Fatalf("cluster node %s not ready:\n%s\n%s", addr, info, repl)
			}
			time.Sleep(20 * time.Millisecond)
		}
		_ = c.Close()
	}
	return nodes
}

// clusterAddrs returns the addresses of nodes.
func clusterAddrs(nodes map[string]*redistest.Server) []string {
	var addrs []string
	for addr := range nodes {
		addrs = append(addrs, addr)
	}
	return addrs
}

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id, addr, master string
	flags            []string
	slots            int // how many hash slots the node serves
}

func (n clusterNode) is(flag string) bool { return slices.Contains(n.flags, flag) }

// clusterNodes returns CLUSTER NODES as seen by the node at addr.
func clusterNodes(ctx context.Context, addr string) ([]clusterNode, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	raw, err := c.ClusterNodes(ctx).Result()
	if err != nil {
		return nil, err
	}
	var out []clusterNode
	for _, line := range strings.Split(strings.TrimSpace(raw), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		n := clusterNode{id: f[0], addr: addr, master: f[3], flags: strings.Split(f[2], ",")}
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") {
				continue // a slot being migrated
			}
			lo, hi, found := strings.Cut(r, "-")
			a, _ := strconv.Atoi(lo)
			b := a
			if found {
				b, _ = strconv.Atoi(hi)
			}
			n.slots += b - a + 1
		}
		out = append(out, n)
	}
	return out, nil
}

// replicaOf returns the address of the replica of the primary at addr.
func replicaOf(t *testing.T, primary string) string {
	t.Helper()
	ns, err := clusterNodes(t.Context(), primary)
	if err != nil {
		t.Fatalf("CLUSTER NODES on %s: %v", primary, err)
	}
	var id string
	for _, n := range ns {
		if n.addr == primary {
			id = n.id
		}
	}
	for _, n := range ns {
		if n.master == id && n.is("slave") {
			return n.addr
		}
	}
	t.Fatalf("primary %s has no replica: %+v", primary, ns)
	return ""
}

// awaitPromotion polls the replica until it reports itself a primary, and
// returns when it first did.
func awaitPromotion(t *testing.T, replica string, limit time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		ns, err := clusterNodes(ctx, replica)
		cancel()
		if err == nil {
			for _, n := range ns {
				if n.addr == replica && n.is("master") {
					return time.Now()
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("replica %s was not promoted within %v", replica, limit)
	return time.Time{}
}

// freePort returns a TCP port on loopback that nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
