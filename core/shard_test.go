package slidelimit_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// holeConn is a connection whose replies stop arriving while hole is set,
// as if the network path to one Redis node dropped every packet.
type holeConn struct {
	net.Conn
	hole     *atomic.Bool
	mu       sync.Mutex
	deadline time.Time
}

func (c *holeConn) Read(b []byte) (int, error) {
	if c.hole.Load() {
		c.mu.Lock()
		d := c.deadline
		c.mu.Unlock()
		if d.IsZero() {
			d = time.Now().Add(time.Minute)
		}
		time.Sleep(time.Until(d))
		return 0, os.ErrDeadlineExceeded
	}
	return c.Conn.Read(b)
}

func (c *holeConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return c.Conn.SetDeadline(t)
}

func (c *holeConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return c.Conn.SetReadDeadline(t)
}

// TestFailedShardLeavesOthersAlone cuts the replies of one Cluster primary
// for one client: the identities it serves are decided by the policy, and
// those of the healthy primaries never fall back, because every node has a
// queue and a circuit of its own. Then the node answers again and its
// identities come back.
func TestFailedShardLeavesOthersAlone(t *testing.T) {
	probe := redistest.ClusterClient(t) // skips, or fails under make test, without a cluster
	ctx := t.Context()
	var ids []string
	node := map[string]string{}
	for i := range 60 {
		id := fmt.Sprintf("shard%d", i)
		key, _ := slidelimit.Key("p:", id, slidelimit.PerMinute(1000))
		c, err := probe.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		node[id] = c.Options().Addr
	}
	victim := node[ids[0]]
	hole := new(atomic.Bool)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:       strings.Split(os.Getenv(redistest.EnvClusterAddrs), ","),
		ReadTimeout: 2 * time.Second,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
			if err != nil || addr != victim {
				return c, err
			}
			return &holeConn{Conn: c, hole: hole}, nil
		},
	})
	t.Cleanup(func() { _ = rdb.Close() })

	lim, _ := newLimiter(t, rdb, slidelimit.PerMinute(1000), slidelimit.WithTimeout(100*time.Millisecond))
	for _, id := range ids {
		allow(t, lim, id) // every node answers
	}
	hole.Store(true)
	var mu sync.Mutex
	var healthyFallbacks, victimFallbacks, victimCalls int
	var wg sync.WaitGroup
	for range 5 {
		for _, id := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := lim.Allow(ctx, id)
				mu.Lock()
				defer mu.Unlock()
				if node[id] == victim {
					victimCalls++
					if res.Fallback && errors.Is(err, slidelimit.ErrUnavailable) {
						victimFallbacks++
					}
				} else if res.Fallback || err != nil {
					healthyFallbacks++
					t.Errorf("Allow(%s) on a healthy node = %+v, %v, want Redis's decision", id, res, err)
				}
			}()
		}
	}
	wg.Wait()
	t.Logf("one primary silent: %d of %d calls on it fell back, %d calls on the healthy ones fell back", victimFallbacks, victimCalls, healthyFallbacks)
	if victimCalls == 0 || victimFallbacks != victimCalls {
		t.Errorf("%d of %d calls on the silent node fell back, want all", victimFallbacks, victimCalls)
	}

	hole.Store(false)
	healed := time.Now()
	for {
		_, err := lim.Allow(ctx, ids[0])
		if err == nil {
			break
		}
		if time.Since(healed) > 10*time.Second {
			t.Fatalf("the node's identities still fall back 10s after it answers again: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("the node's identities were decided by Redis again %v after it answered again", time.Since(healed))
}
