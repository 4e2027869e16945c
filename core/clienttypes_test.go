package slidelimit_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// hookable is a go-redis client whose hooks a test can add to.
type hookable interface {
	redis.Scripter
	AddHook(redis.Hook)
}

// clientType makes one kind of go-redis client against real servers.
type clientType struct {
	name string
	make func(t *testing.T) hookable
}

// clientTypes returns every kind of client a Limiter takes.
func clientTypes() []clientType {
	return []clientType{
		{"Client", func(t *testing.T) hookable { return redistest.Client(t) }},
		{"Client with ContextTimeoutEnabled", func(t *testing.T) hookable { return timeoutClient(t) }},
		{"ClusterClient with ContextTimeoutEnabled", func(t *testing.T) hookable { return timeoutClusterClient(t) }},
		{"Client with OnConnect", func(t *testing.T) hookable {
			rdb := redis.NewClient(&redis.Options{Addr: redistest.Client(t).Options().Addr,
				OnConnect: func(ctx context.Context, cn *redis.Conn) error { return cn.Ping(ctx).Err() }})
			t.Cleanup(func() { _ = rdb.Close() })
			return rdb
		}},
		{"Conn", func(t *testing.T) hookable {
			cn := redistest.Client(t).Conn()
			t.Cleanup(func() { _ = cn.Close() })
			return cn
		}},
		{"UniversalClient", func(t *testing.T) hookable {
			rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{redistest.Client(t).Options().Addr}})
			t.Cleanup(func() { _ = rdb.Close() })
			return rdb
		}},
		{"FailoverClient", func(t *testing.T) hookable {
			sentinel := startSentinel(t)
			rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "primary", SentinelAddrs: []string{sentinel}})
			t.Cleanup(func() { _ = rdb.Close() })
			return rdb
		}},
		{"FailoverClusterClient", func(t *testing.T) hookable {
			sentinel := startSentinel(t)
			rdb := redis.NewFailoverClusterClient(&redis.FailoverOptions{MasterName: "primary", SentinelAddrs: []string{sentinel}})
			t.Cleanup(func() { _ = rdb.Close() })
			return rdb
		}},
		{"Ring", func(t *testing.T) hookable {
			rdb := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{
				"a": redistest.StartServer(t).Addr, "b": redistest.StartServer(t).Addr}})
			t.Cleanup(func() { _ = rdb.Close() })
			return rdb
		}},
		{"ClusterClient", func(t *testing.T) hookable { return redistest.ClusterClient(t) }},
		{"UniversalClient of a Cluster", func(t *testing.T) hookable {
			seeds := redistest.ClusterClient(t).Options().Addrs
			rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: seeds})
			t.Cleanup(func() { _ = rdb.Close() })
			return rdb
		}},
	}
}

// startSentinel starts a primary with a Sentinel watching it as "primary",
// and returns the Sentinel's address once it answers for the primary.
func startSentinel(t *testing.T) string {
	t.Helper()
	primary := redistest.StartServer(t)
	sentinel := redistest.StartSentinel(t, "primary", primary.Addr)
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel.Addr})
	t.Cleanup(func() { _ = sc.Close() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		addr, err := sc.GetMasterAddrByName(t.Context(), "primary").Result()
		if err == nil && strings.Join(addr, ":") == primary.Addr {
			return sentinel.Addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Sentinel did not name the primary within 10s: %v, %v", addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// scriptHook counts the allow scripts a client ran, alone or pipelined,
// as the user's own hooks (tracing, metrics) see them: an EVALSHA answered
// NOSCRIPT, followed by an EVAL, does not count.
type scriptHook struct{ scripts atomic.Int64 }

func (h *scriptHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.count(cmd)
		return err
	}
}

func (h *scriptHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			h.count(cmd)
		}
		return err
	}
}

func (h *scriptHook) count(cmd redis.Cmder) {
	if name := cmd.Name(); (name == "evalsha" || name == "eval") && !redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		h.scripts.Add(1)
	}
}

// TestEveryClientType runs a limiter on each kind of go-redis client
// against real servers: a concurrent burst far above the limit is admitted
// exactly, the client's own hooks see every script the limiter sends, and
// a refund gives its unit back.
func TestEveryClientType(t *testing.T) {
	for _, ct := range clientTypes() {
		t.Run(ct.name, func(t *testing.T) {
			t.Parallel()
			rdb := ct.make(t)
			hook := &scriptHook{}
			rdb.AddHook(hook)
			lim, _ := newLimiter(t, rdb, slidelimit.Per(5, time.Minute), slidelimit.WithDenyCache(0))

			var admitted, fallbacks atomic.Int64
			var firstErr atomic.Value
			var wg sync.WaitGroup
			for range 200 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					res, err := lim.Allow(t.Context(), "burst")
					if err != nil {
						firstErr.CompareAndSwap(nil, err.Error())
					}
					if res.Allowed {
						admitted.Add(1)
					}
					if res.Fallback {
						fallbacks.Add(1)
					}
				}()
			}
			wg.Wait()
			if admitted.Load() != 5 || fallbacks.Load() != 0 {
				t.Fatalf("200 concurrent Allow, limit 5 = %d admitted, %d fallbacks (first error %v), want 5 and 0",
					admitted.Load(), fallbacks.Load(), firstErr.Load())
			}
			if hook.scripts.Load() == 0 {
				t.Fatal("the client's hook saw none of the limiter's scripts")
			}

			// One decision, one script, seen by the hook.
			before := hook.scripts.Load()
			res := allow(t, lim, "alone")
			if got := hook.scripts.Load() - before; got != 1 {
				t.Errorf("the client's hook saw %d scripts for one decision, want 1", got)
			}
			if err := lim.Refund(t.Context(), res); err != nil {
				t.Fatalf("Refund = %v", err)
			}
			for i := range 5 {
				if res := allow(t, lim, "alone"); !res.Allowed {
					t.Fatalf("Allow #%d after a refund = %+v, want admitted", i+1, res)
				}
			}
			if res := allow(t, lim, "alone"); res.Allowed {
				t.Fatalf("Allow #6 after a refund = %+v, want denied", res)
			}
		})
	}
}

// refuseAll is a go-redis Limiter that refuses every command.
type refuseAll struct{ asked atomic.Int64 }

var errRefused = errors.New("refused by the client's limiter")

func (r *refuseAll) Allow() error       { r.asked.Add(1); return errRefused }
func (r *refuseAll) ReportResult(error) {}

// TestClientLimiterApplies gives the client a go-redis Limiter that refuses
// everything: the limiter's decisions go through it, fall back by the
// policy with the refusal wrapped, and open the breaker, after which the
// client's limiter is asked no more.
func TestClientLimiterApplies(t *testing.T) {
	refuse := &refuseAll{}
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Client(t).Options().Addr, Limiter: refuse})
	t.Cleanup(func() { _ = rdb.Close() })
	lim, _ := newLimiter(t, rdb, slidelimit.PerMinute(5), slidelimit.WithFailurePolicy(slidelimit.FailClosed),
		slidelimit.WithBreaker(3, time.Minute))
	for i := range 3 {
		res, err := lim.Allow(t.Context(), "x")
		if res.Allowed || !res.Fallback || !errors.Is(err, slidelimit.ErrUnavailable) || !errors.Is(err, errRefused) {
			t.Fatalf("Allow #%d through a refusing client = %+v, %v; want a fail-closed fallback wrapping the refusal", i+1, res, err)
		}
	}
	asked := refuse.asked.Load()
	if asked < 3 {
		t.Fatalf("the client's limiter was asked %d times for 3 decisions, want at least 3", asked)
	}
	res, err := lim.Allow(t.Context(), "x")
	if res.Allowed || !errors.Is(err, slidelimit.ErrCircuitOpen) {
		t.Fatalf("Allow after 3 refusals = %+v, %v; want a fallback with the breaker open", res, err)
	}
	if refuse.asked.Load() != asked {
		t.Errorf("the client's limiter was asked again with the breaker open")
	}
}
