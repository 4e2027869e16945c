package model

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// env is the Redis a mode runs on and the go-redis clients of its
// processes, with the means to hurt it.
type env struct {
	name    string
	cluster bool
	clients []redis.UniversalClient // one per process
	admins  []*redis.Client         // one per node (the primaries of a cluster)
	server  *redistest.Server       // a private standalone server, or nil
	private bool                    // the servers are the mode's own: faults may hit them
	slowlog time.Duration           // slowlog-log-slower-than, if the mode sets it
	down    bool                    // the private server is stopped
	healed  time.Time               // when Redis last came back or had its connections killed
	mig     *migration              // the latest slot migration
	watch   *keyWatch               // every script command's keys, judged
	gate    *partition              // cuts the processes' clients off from Redis (replay_test.go)
	reader  redis.UniversalClient   // the checker's own client of the limiters' keys, never cut off
}

// processes is how many go-redis clients each mode gives its limiters:
// the first gives up at a context's deadline (ContextTimeoutEnabled), the
// second does not, so both of the limiter's ways of keeping a timeout run.
const processes = 2

// newStandaloneEnv returns a mode on a private standalone redis-server,
// which faults may stall, kill and restart.
func newStandaloneEnv(t *testing.T, name string, slowlog time.Duration) *env {
	srv := redistest.StartServer(t, "--enable-debug-command", "local")
	e := &env{name: name, server: srv, private: true, slowlog: slowlog, gate: &partition{}}
	for i := range processes {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: i == 0, PoolSize: 16, Dialer: e.gate.dial})
		t.Cleanup(func() { _ = c.Close() })
		e.clients = append(e.clients, c)
	}
	reader := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = reader.Close() })
	e.reader = reader
	e.admins = []*redis.Client{adminClient(t, srv.Addr)}
	e.configure(t)
	e.watchKeys(t)
	return e
}

// newClusterEnv returns a mode on a Redis Cluster of its own, three
// primaries and no replicas, whose slots it may migrate.
func newClusterEnv(t *testing.T, name string, slowlog time.Duration) *env {
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Fatalf("redis-cli is needed to create a cluster: %v", err)
	}
	dir := t.TempDir()
	var addrs []string
	for i := range 3 {
		s := redistest.StartServer(t, "--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes-"+strconv.Itoa(i)+".conf"),
			"--cluster-node-timeout", "5000", "--cluster-port", strconv.Itoa(freePort(t)))
		addrs = append(addrs, s.Addr)
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.CommandContext(t.Context(), "redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	e := &env{name: name, cluster: true, private: true, slowlog: slowlog, gate: &partition{}}
	for _, addr := range addrs {
		e.admins = append(e.admins, adminClient(t, addr))
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, c := range e.admins {
		for {
			info, _ := c.ClusterInfo(t.Context()).Result()
			if strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("cluster node %s not ready:\n%s", c.Options().Addr, info)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for i := range processes {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: i == 0, PoolSize: 16, Dialer: e.gate.dial})
		t.Cleanup(func() { _ = c.Close() })
		e.clients = append(e.clients, c)
	}
	reader := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = reader.Close() })
	e.reader = reader
	e.configure(t)
	e.watchKeys(t)
	return e
}

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// adminClient returns a client of addr for the checker's own commands.
func adminClient(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ReadTimeout: 30 * time.Second})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// configure sets SLOWLOG's threshold on the mode's private servers.
func (e *env) configure(t tester) {
	if !e.private || e.slowlog <= 0 {
		return
	}
	for _, c := range e.admins {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := c.ConfigSet(ctx, "slowlog-log-slower-than", strconv.FormatInt(e.slowlog.Microseconds(), 10)).Err()
		if err == nil {
			err = c.Do(ctx, "SLOWLOG", "RESET").Err()
		}
		cancel()
		if err != nil {
			t.Fatalf("configure SLOWLOG on %s: %v", c.Options().Addr, err)
		}
	}
}

// pause holds every client's commands on every node for d (CLIENT PAUSE
// ALL): Redis accepts them and runs them when the pause ends, which it
// returns (at the latest).
func (e *env) pause(d time.Duration) time.Time {
	for _, c := range e.admins {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = c.Do(ctx, "CLIENT", "PAUSE", d.Milliseconds(), "ALL").Err()
		cancel()
	}
	return time.Now().Add(d)
}

// kill closes every normal client connection on every node.
func (e *env) kill() {
	for _, c := range e.admins {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = c.Do(ctx, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Err()
		cancel()
	}
}

// keyInfo is what the checker reads of one key.
type keyInfo struct {
	key     string
	typ     string
	members int64 // ZCARD of a sorted set
	length  int64 // STRLEN of a string
	bytes   int64 // MEMORY USAGE
	ttl     time.Duration
}

// keys reads every key under prefix on every node.
func (e *env) keys(ctx context.Context, prefix string) ([]keyInfo, error) {
	var out []keyInfo
	for _, c := range e.admins {
		var names []string
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			names = append(names, iter.Val())
		}
		if err := iter.Err(); err != nil {
			return nil, err
		}
		if len(names) == 0 {
			continue
		}
		types := make([]*redis.StatusCmd, len(names))
		mem := make([]*redis.IntCmd, len(names))
		ttl := make([]*redis.DurationCmd, len(names))
		zc := make([]*redis.IntCmd, len(names))
		sl := make([]*redis.IntCmd, len(names))
		_, _ = c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, k := range names {
				types[i] = p.Type(ctx, k)
				mem[i] = p.MemoryUsage(ctx, k, 0)
				ttl[i] = p.PTTL(ctx, k)
				zc[i] = p.ZCard(ctx, k)  // WRONGTYPE for a string: ignored
				sl[i] = p.StrLen(ctx, k) // WRONGTYPE for a sorted set: ignored
			}
			return nil
		})
		for i, k := range names {
			if types[i].Val() == "none" || types[i].Err() != nil {
				continue // expired meanwhile, or moved by a migration
			}
			ki := keyInfo{key: k, typ: types[i].Val(), bytes: mem[i].Val(), ttl: ttl[i].Val()}
			switch ki.typ {
			case "zset":
				ki.members = zc[i].Val()
			case "string":
				ki.length = sl[i].Val()
			}
			out = append(out, ki)
		}
	}
	return out, nil
}

// slowEntry is one SLOWLOG entry of a script call.
type slowEntry struct {
	node     string
	duration time.Duration
	args     []string
}

// slowScripts returns the SLOWLOG entries of script calls that name prefix,
// on every node.
func (e *env) slowScripts(ctx context.Context, prefix string) ([]slowEntry, error) {
	var out []slowEntry
	for _, c := range e.admins {
		logs, err := c.SlowLogGet(ctx, 128).Result()
		if err != nil {
			return nil, err
		}
		for _, l := range logs {
			if len(l.Args) == 0 {
				continue
			}
			switch strings.ToLower(l.Args[0]) {
			case "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro":
			default:
				continue
			}
			if !slices.ContainsFunc(l.Args, func(a string) bool { return strings.Contains(a, prefix) }) {
				continue
			}
			out = append(out, slowEntry{node: c.Options().Addr, duration: l.Duration, args: l.Args})
		}
	}
	return out, nil
}

// migration is a slot moving between primaries in the background.
type migration struct {
	who      string    // the model identity whose slot moves ("" outside the model)
	began    time.Time // when it began
	finished atomic.Bool
	ended    atomic.Int64 // UnixNano when it ended
	wg       sync.WaitGroup
	err      error
	log      []string
}

func (m *migration) done() bool { return m.finished.Load() }

// splitDuring reports whether m may have kept who's keys split (TRYAGAIN)
// for the whole of a..b: it moved who's slot, began before a and had not
// ended by b.
func (m *migration) splitDuring(who string, a, b time.Time) bool {
	if m == nil || m.who != who || m.began.After(a) {
		return false
	}
	end := m.ended.Load()
	return end == 0 || end >= b.UnixNano()
}

// wait returns once the migration has ended, with its error.
func (m *migration) wait() error {
	m.wg.Wait()
	return m.err
}

// migrate moves the hash slot of key from its primary to another one, as
// redis-cli --cluster reshard --cluster-replace does, but one key at a
// time with pause between keys: SETSLOT IMPORTING on the target and
// MIGRATING on the source, MIGRATE of each key the source still holds
// (string keys first if stringsFirst, else sorted sets first), retried
// with REPLACE on BUSYKEY, then SETSLOT NODE on every primary.
func (e *env) migrate(key string, stringsFirst bool, pause time.Duration) *migration {
	m := &migration{began: time.Now()}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer m.finished.Store(true)
		m.err = e.runMigration(m, key, stringsFirst, pause)
		m.ended.Store(time.Now().UnixNano())
	}()
	return m
}

func (e *env) runMigration(m *migration, key string, stringsFirst bool, pause time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin := e.admins[0]
	slot, err := admin.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		return err
	}
	ids := map[string]string{} // addr → node id
	owner := ""
	for _, c := range e.admins {
		id, err := c.Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			return err
		}
		ids[c.Options().Addr] = id
	}
	slots, err := admin.ClusterSlots(ctx).Result()
	if err != nil {
		return err
	}
	for _, s := range slots {
		if int64(s.Start) <= slot && slot <= int64(s.End) && len(s.Nodes) > 0 {
			owner = s.Nodes[0].Addr
		}
	}
	var src, dst *redis.Client
	for _, c := range e.admins {
		switch {
		case c.Options().Addr == owner:
			src = c
		case dst == nil:
			dst = c
		}
	}
	if src == nil || dst == nil {
		return fmt.Errorf("slot %d: no source (%q) or target among the primaries", slot, owner)
	}
	srcID, dstID := ids[src.Options().Addr], ids[dst.Options().Addr]
	if err := dst.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID).Err(); err != nil {
		return fmt.Errorf("SETSLOT IMPORTING: %w", err)
	}
	if err := src.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID).Err(); err != nil {
		return fmt.Errorf("SETSLOT MIGRATING: %w", err)
	}
	host, port, _ := net.SplitHostPort(dst.Options().Addr)
	for round := 0; ; round++ {
		keys, err := src.ClusterGetKeysInSlot(ctx, int(slot), 100).Result()
		if err != nil {
			return fmt.Errorf("GETKEYSINSLOT: %w", err)
		}
		if len(keys) == 0 || round > 50 {
			break
		}
		kinds := map[string]string{}
		for _, k := range keys {
			kinds[k], _ = src.Type(ctx, k).Result()
		}
		slices.SortStableFunc(keys, func(a, b string) int {
			ra, rb := kinds[a] == "string", kinds[b] == "string"
			if ra == rb {
				return strings.Compare(a, b)
			}
			if ra == stringsFirst {
				return -1
			}
			return 1
		})
		for _, k := range keys {
			err := src.Do(ctx, "MIGRATE", host, port, "", 0, 5000, "KEYS", k).Err()
			if err != nil && strings.HasPrefix(err.Error(), "BUSYKEY") {
				err = src.Do(ctx, "MIGRATE", host, port, "", 0, 5000, "REPLACE", "KEYS", k).Err()
				m.log = append(m.log, "BUSYKEY "+k)
			}
			if err != nil && err.Error() != "NOKEY" {
				return fmt.Errorf("MIGRATE %s: %w", k, err)
			}
			m.log = append(m.log, "moved "+kinds[k]+" "+k)
			time.Sleep(pause)
		}
	}
	for _, c := range append([]*redis.Client{dst, src}, e.admins...) {
		if err := c.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err(); err != nil {
			return fmt.Errorf("SETSLOT NODE on %s: %w", c.Options().Addr, err)
		}
	}
	return nil
}
