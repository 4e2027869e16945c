package integration

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// TestRetriedCallCountsOnce loses the reply of each call's first EVALSHA
// after Redis has run it, as a network cut would, so that the limiter sends
// the command again on a new connection. The retry carries the
// same request id, so the request is counted once: five calls under a limit
// of five are all admitted, the set holds five members, not ten, and a sixth
// call is denied. Refunding a retried request removes exactly its member.
//
// With MaxRetries -1 go-redis sends nothing again itself, and the limiter
// resends a call whose connection broke, once, under the same id.
func TestRetriedCallCountsOnce(t *testing.T) {
	for _, retries := range []int{0, -1} {
		t.Run(fmt.Sprintf("MaxRetries=%d", retries), func(t *testing.T) {
			retriedCallCountsOnce(t, retries)
		})
	}
}

func retriedCallCountsOnce(t *testing.T, maxRetries int) {
	const quota = 5
	limit := slidelimit.PerMinute(quota)
	for _, be := range backends() {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			drop := &replyDropper{}
			rdb := dropClient(t, targetOf(t, be.client(t)), drop.dial, maxRetries)
			prefix := redistest.Prefix(t)
			const identity = "retried"
			lim := newLimiter(t, rdb, prefix, limit, slidelimit.WithTimeout(10*time.Second))
			// Load the script, so that the replies lost below are the
			// script's decisions and not NOSCRIPT errors.
			if _, err := lim.Peek(t.Context(), identity); err != nil {
				t.Fatalf("Peek(%q) = %v", identity, err)
			}

			var third slidelimit.Result
			for i := 1; i <= quota+1; i++ {
				drop.arm()
				res, err := lim.Allow(t.Context(), identity)
				if err != nil {
					t.Fatalf("call %d: Allow(%q) = %v, want a decision after the retry", i, identity, err)
				}
				wantAllowed := i <= quota
				if res.Allowed != wantAllowed || res.Fallback {
					t.Fatalf("call %d: Allow(%q) = {Allowed: %v, Fallback: %v}, want {Allowed: %v, Fallback: false}",
						i, identity, res.Allowed, res.Fallback, wantAllowed)
				}
				if want := max(quota-i, 0); res.Remaining != want {
					t.Errorf("call %d: Allow(%q).Remaining = %d, want %d", i, identity, res.Remaining, want)
				}
				if got, want := zcard(t, rdb, prefix, identity, limit), int64(min(i, quota)); got != want {
					t.Errorf("call %d: ZCARD = %d, want %d", i, got, want)
				}
				if i == 3 {
					third = res
				}
			}
			if got := drop.executed.Load(); got != quota+1 {
				t.Fatalf("%d replies of executed scripts were lost, want %d: the retry path was not exercised", got, quota+1)
			}

			if err := lim.Refund(t.Context(), third); err != nil {
				t.Fatalf("Refund(third call) = %v", err)
			}
			if got := zcard(t, rdb, prefix, identity, limit); got != quota-1 {
				t.Errorf("ZCARD after refunding one retried call = %d, want %d", got, quota-1)
			}
		})
	}
}

// dropClient returns a client of tg, with maxRetries (0: go-redis's
// default), that dials through dial.
func dropClient(t *testing.T, tg target, dial func(context.Context, string, string) (net.Conn, error), maxRetries int) redis.UniversalClient {
	t.Helper()
	var rdb redis.UniversalClient
	if tg.Cluster {
		rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: tg.Addrs, Dialer: dial, MaxRetries: maxRetries})
	} else {
		rdb = redis.NewClient(&redis.Options{Addr: tg.Addrs[0], Dialer: dial, MaxRetries: maxRetries})
	}
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// replyDropper makes connections that, once armed, lose the reply of the
// next EVALSHA: the command reaches Redis and runs, the reply arrives, and
// the connection is then closed and reports io.EOF, which the limiter retries.
type replyDropper struct {
	mu       sync.Mutex
	armed    bool
	executed atomic.Int64 // lost replies that were not errors: the script ran
}

// arm makes the next EVALSHA or EVAL on any connection lose its reply.
func (d *replyDropper) arm() {
	d.mu.Lock()
	d.armed = true
	d.mu.Unlock()
}

// take reports whether the dropper was armed, and disarms it.
func (d *replyDropper) take() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	armed := d.armed
	d.armed = false
	return armed
}

func (d *replyDropper) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &dropConn{Conn: c, d: d}, nil
}

// dropConn is a connection made by a replyDropper.
type dropConn struct {
	net.Conn
	d       *replyDropper
	drop    bool // lose the next reply
	dropped bool // the reply was lost, and the connection with it
}

var (
	evalshaCommand = []byte("\r\nevalsha\r\n")
	evalCommand    = []byte("\r\neval\r\n")
)

func (c *dropConn) Write(p []byte) (int, error) {
	lower := bytes.ToLower(p)
	if (bytes.Contains(lower, evalshaCommand) || bytes.Contains(lower, evalCommand)) && c.d.take() {
		c.drop = true
	}
	return c.Conn.Write(p)
}

func (c *dropConn) Read(p []byte) (int, error) {
	if c.dropped {
		// Lost with its reply: newer go-redis versions read a connection
		// again (a health check) before they give it up.
		return 0, io.EOF
	}
	if !c.drop {
		return c.Conn.Read(p)
	}
	c.dropped = true
	// Redis replies only after the script ran: wait for the reply's first
	// bytes, then lose it with the connection.
	buf := make([]byte, 1)
	if _, err := io.ReadFull(c.Conn, buf); err == nil && buf[0] != '-' {
		c.d.executed.Add(1)
	} else {
		// No script ran (NOSCRIPT: tests beside this one flush the
		// script cache): lose the reply of the call sent again instead,
		// by EVAL or EVALSHA.
		c.d.arm()
	}
	_ = c.Close()
	return 0, io.EOF
}
