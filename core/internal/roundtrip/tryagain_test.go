package roundtrip

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// TestTryAgainWhileASlotMigrates splits the two keys of one hash tag
// between two primaries of the harness's Cluster, as a live migration
// does: the old primary answers ASK, the new one TRYAGAIN, until the
// migration ends. A call whose timeout passes meanwhile fails, and the
// breaker stays closed: the node answered, even where go-redis's own
// redirects hid its answers from the limiter. A call with time to spare is
// sent again and again, and once the slot is settled, Redis decides it. So
// for a decision (Decide) and for any other command (Run).
func TestTryAgainWhileASlotMigrates(t *testing.T) {
	for _, ctxTimeout := range []bool{false, true} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", ctxTimeout), func(t *testing.T) {
			opts := *redistest.ClusterClient(t).Options()
			opts.ContextTimeoutEnabled = ctxTimeout
			rdb := redis.NewClusterClient(&opts)
			t.Cleanup(func() { _ = rdb.Close() })
			hook := &tryAgainHook{}
			rdb.AddHook(hook)
			ctx := t.Context()
			m := splitSlot(t, rdb)
			decide := func(c *Caller) error {
				_, err := c.Decide(ctx, decision(100, m.log, m.other))
				return err
			}
			run := func(c *Caller) error {
				return c.Run(ctx, func(ctx context.Context) error {
					n, err := rdb.Exists(ctx, m.log, m.other).Result()
					if err == nil && n != 2 {
						err = fmt.Errorf("EXISTS of both keys = %d, want 2", n)
					}
					return err
				})
			}

			short := New(rdb, Config{Timeout: 300 * time.Millisecond, BreakerFailures: 1, BreakerCooldown: time.Minute})
			if err := decide(short); !redis.HasErrorPrefix(err, "TRYAGAIN") {
				t.Errorf("Decide while the keys are split, with a timeout of 300ms = %v, want TRYAGAIN once the timeout passed", err)
			}
			if _, err := short.brk.admit(m.srcAddr); err != nil {
				t.Errorf("after TRYAGAIN outlasted a call's timeout the breaker = %v, want closed: the node answered", err)
			}
			if err := run(short); err == nil {
				t.Errorf("Run while the keys are split, with a timeout of 300ms = %v, want an error", err)
			}
			// How often a call of 300 ms is sent again is not counted here:
			// go-redis retries TRYAGAIN up to MaxRedirects times inside one
			// command, with back-offs that stretch on a loaded host, so such
			// a call may see its node's reply only once. That a call is sent
			// again while its time lasts is what the long calls below show.

			// go-redis follows ASK and retries TRYAGAIN itself inside one
			// command, pausing 8 to 72 ms before each attempt: a call of
			// 100 ms (the limiter's default) often times out in there,
			// where the node's answers cannot be seen. Once the node has
			// answered TRYAGAIN to the tag, as above, such a timeout does
			// not count either.
			for i := range 10 {
				c := New(rdb, Config{Timeout: 100 * time.Millisecond, BreakerFailures: 1, BreakerCooldown: time.Minute})
				err := decide(c)
				if !redis.HasErrorPrefix(err, "TRYAGAIN") && !errors.Is(err, errMigrating) {
					t.Errorf("Decide #%d of 100ms while the keys are split = %v, want TRYAGAIN or errMigrating", i+1, err)
				}
				if _, err := c.brk.admit(m.srcAddr); err != nil {
					t.Fatalf("after Decide #%d of 100ms while the keys were split the breaker = %v, want closed", i+1, err)
				}
			}

			long := New(rdb, Config{Timeout: 10 * time.Second, BreakerFailures: 1, BreakerCooldown: time.Minute})
			hook.decides.Store(0)
			hook.runs.Store(0)
			decided, ran := make(chan error, 1), make(chan error, 1)
			go func() { decided <- decide(long) }()
			go func() { ran <- run(long) }()
			// go-redis gives up on TRYAGAIN after its MaxRedirects (3); the
			// calls are sent more times than that while the slot stays split.
			for hook.decides.Load() < 6 || hook.runs.Load() < 6 {
				select {
				case err := <-decided:
					t.Fatalf("Decide with a timeout of 10s ended while the keys were split: %v; want it sent until they are together", err)
				case err := <-ran:
					t.Fatalf("Run with a timeout of 10s ended while the keys were split: %v; want it sent until they are together", err)
				case <-time.After(time.Millisecond):
				}
			}
			m.settle(t)
			if err := <-decided; err != nil {
				t.Errorf("Decide after the slot was settled = %v, want Redis's decision", err)
			}
			if err := <-ran; err != nil {
				t.Errorf("Run after the slot was settled = %v, want Redis's answer", err)
			}
			t.Logf("the calls were sent again %d and %d times while the keys were split", hook.decides.Load(), hook.runs.Load())
		})
	}
}

// tryAgainHook counts the TRYAGAIN replies a ClusterClient returns, after
// its own redirects: to the allow script and to other commands.
type tryAgainHook struct {
	decides, runs atomic.Int64
}

func (h *tryAgainHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *tryAgainHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if redis.HasErrorPrefix(err, "TRYAGAIN") {
			if name := cmd.Name(); name == "evalsha" || name == "eval" {
				h.decides.Add(1)
			} else {
				h.runs.Add(1)
			}
		}
		return err
	}
}

func (h *tryAgainHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// migration is a slot of the harness's Cluster moving from one primary to
// another, with the two keys of a test's hash tag split between them.
type migration struct {
	slot             int64
	log, other       string // the test's keys: log on the old primary, other on the new one
	srcAddr, dstAddr string
	srcID, dstID     string
	admins           map[string]*redis.Client // a client of each primary, by address
}

// splitSlot picks a hash tag whose slot holds no key yet, writes its two
// keys on the slot's primary, marks the slot MIGRATING there and IMPORTING
// on another primary, and MIGRATEs one of the keys. Whatever happens, the
// test's keys are deleted and the slot given back to its primary when the
// test ends.
func splitSlot(t *testing.T, rdb *redis.ClusterClient) *migration {
	t.Helper()
	ctx := t.Context()
	m := &migration{admins: map[string]*redis.Client{}}
	var mu sync.Mutex
	err := rdb.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		addr := c.Options().Addr
		admin := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = admin.Close() })
		mu.Lock()
		defer mu.Unlock()
		m.admins[addr] = admin
		return nil
	})
	if err != nil || len(m.admins) < 2 {
		t.Fatalf("the Cluster's primaries: %d, %v; want two at least", len(m.admins), err)
	}
	prefix := redistest.Prefix(t)
	for i := 0; ; i++ {
		tag := fmt.Sprintf("{%s%d}", prefix, i)
		m.log, m.other = tag+"log", tag+"other"
		if m.slot, err = rdb.ClusterKeySlot(ctx, m.log).Result(); err != nil {
			t.Fatal(err)
		}
		src, err := rdb.MasterForKey(ctx, m.log)
		if err != nil {
			t.Fatal(err)
		}
		m.srcAddr = src.Options().Addr
		n, err := m.admins[m.srcAddr].ClusterCountKeysInSlot(ctx, int(m.slot)).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
	}
	ids := map[string]string{}
	for addr, c := range m.admins {
		id, err := c.Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			t.Fatal(err)
		}
		ids[addr] = id
		if addr != m.srcAddr && (m.dstAddr == "" || addr < m.dstAddr) {
			m.dstAddr = addr
		}
	}
	m.srcID, m.dstID = ids[m.srcAddr], ids[m.dstAddr]
	src, dst := m.admins[m.srcAddr], m.admins[m.dstAddr]
	if err := rdb.ZAdd(ctx, m.log, redis.Z{Member: "m"}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Expire(ctx, m.log, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, m.other, "x", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.restore(t) })
	for _, step := range []struct {
		c    *redis.Client
		args []any
	}{
		{dst, []any{"CLUSTER", "SETSLOT", m.slot, "IMPORTING", m.srcID}},
		{src, []any{"CLUSTER", "SETSLOT", m.slot, "MIGRATING", m.dstID}},
		{src, m.migrateArgs(m.other)},
	} {
		if err := step.c.Do(ctx, step.args...).Err(); err != nil {
			t.Fatalf("%v on %s: %v", step.args, step.c.Options().Addr, err)
		}
	}
	return m
}

// migrateArgs returns the MIGRATE of key to the new primary.
func (m *migration) migrateArgs(key string) []any {
	host, port, _ := net.SplitHostPort(m.dstAddr)
	return []any{"MIGRATE", host, port, key, 0, 5000}
}

// settle ends the migration as a resharding does: it moves the other key,
// then assigns the slot to the new primary, which announces it first.
func (m *migration) settle(t *testing.T) {
	t.Helper()
	ctx := t.Context()
	if err := m.admins[m.srcAddr].Do(ctx, m.migrateArgs(m.log)...).Err(); err != nil {
		t.Fatalf("MIGRATE %s: %v", m.log, err)
	}
	for _, addr := range m.order(m.dstAddr, m.srcAddr) {
		if err := m.admins[addr].Do(ctx, "CLUSTER", "SETSLOT", m.slot, "NODE", m.dstID).Err(); err != nil {
			t.Fatalf("CLUSTER SETSLOT %d NODE on %s: %v", m.slot, addr, err)
		}
	}
}

// order returns the primaries' addresses, first and second first.
func (m *migration) order(first, second string) []string {
	out := []string{first, second}
	for addr := range m.admins {
		if addr != first && addr != second {
			out = append(out, addr)
		}
	}
	return out
}

// restore deletes the test's keys and gives the slot back to its old
// primary, from wherever the test left it, then waits until every primary
// agrees. Keys other tests wrote in the slot meanwhile go back with it.
func (m *migration) restore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var errs []error
	do := func(c *redis.Client, args ...any) error {
		err := c.Do(ctx, args...).Err()
		if err != nil {
			errs = append(errs, fmt.Errorf("%v on %s: %w", args, c.Options().Addr, err))
		}
		return err
	}
	for _, c := range m.admins {
		// ASKING lets an importing primary, which does not serve the slot
		// yet, take the DEL.
		_, _ = c.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Do(ctx, "ASKING")
			p.Del(ctx, m.log, m.other)
			return nil
		})
	}
	src := m.admins[m.srcAddr]
	for _, c := range m.admins {
		_ = c.Do(ctx, "CLUSTER", "SETSLOT", m.slot, "STABLE").Err()
	}
	if m.ownerOf(ctx, src) != m.srcAddr {
		// The slot moved: bring it back as a resharding would, the old
		// primary importing and taking any keys written there since.
		dst := m.admins[m.dstAddr]
		_ = do(src, "CLUSTER", "SETSLOT", m.slot, "IMPORTING", m.dstID)
		_ = do(dst, "CLUSTER", "SETSLOT", m.slot, "MIGRATING", m.srcID)
		for {
			keys, err := dst.ClusterGetKeysInSlot(ctx, int(m.slot), 100).Result()
			if err != nil || len(keys) == 0 {
				break
			}
			host, port, _ := net.SplitHostPort(m.srcAddr)
			args := []any{"MIGRATE", host, port, "", 0, 5000, "REPLACE", "KEYS"}
			for _, k := range keys {
				args = append(args, k)
			}
			if do(dst, args...) != nil {
				break
			}
		}
	}
	for _, addr := range m.order(m.srcAddr, m.dstAddr) {
		_ = do(m.admins[addr], "CLUSTER", "SETSLOT", m.slot, "NODE", m.srcID)
	}
	for _, c := range m.admins {
		for m.ownerOf(ctx, c) != m.srcAddr {
			if ctx.Err() != nil {
				errs = append(errs, fmt.Errorf("%s does not see slot %d back on %s: %w", c.Options().Addr, m.slot, m.srcAddr, ctx.Err()))
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if len(errs) > 0 {
		t.Errorf("giving slot %d back to %s: %v", m.slot, m.srcAddr, errors.Join(errs...))
	}
}

// ownerOf returns the address of the primary that serves m's slot in c's
// view, or "" if c does not know.
func (m *migration) ownerOf(ctx context.Context, c *redis.Client) string {
	slots, err := c.ClusterSlots(ctx).Result()
	if err != nil {
		return ""
	}
	for _, s := range slots {
		if int64(s.Start) <= m.slot && m.slot <= int64(s.End) && len(s.Nodes) > 0 {
			return s.Nodes[0].Addr
		}
	}
	return ""
}
