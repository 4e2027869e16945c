package slidelimit_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// records is a slog.Handler that keeps what it is given.
type records struct {
	mu   sync.Mutex
	msgs []string
	args []map[string]any
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *records) WithGroup(string) slog.Handler            { return r }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	attrs := map[string]any{}
	rec.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.Any(); return true })
	r.msgs = append(r.msgs, rec.Level.String()+" "+rec.Message)
	r.args = append(r.args, attrs)
	return nil
}

func (r *records) taken() ([]string, []map[string]any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.msgs...), append([]map[string]any(nil), r.args...)
}

// TestAnOutageIsReportedOncePerChange: while Redis is down every call is
// decided by the policy and returns its error, but the logger hears of the
// outage once when it begins and once when it ends, with how many
// decisions the policy made.
func TestAnOutageIsReportedOncePerChange(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	var log records
	lim, err := slidelimit.New(rdb, slidelimit.PerMinute(1000), slidelimit.WithPrefix(redistest.Prefix(t)),
		slidelimit.WithTimeout(200*time.Millisecond), slidelimit.WithLogger(slog.New(&log)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := lim.Allow(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	for i := range 50 {
		if _, err := lim.Allow(ctx, "a"); err == nil {
			t.Fatalf("call %d with Redis down returned no error", i)
		}
	}
	if msgs, _ := log.taken(); len(msgs) != 1 || msgs[0] != "WARN slidelimit: Redis cannot decide; the failure policy does until it can" {
		t.Fatalf("logged %q with Redis down for 50 calls, want one warning", msgs)
	}
	srv.Restart()
	deadline := time.Now().Add(10 * time.Second)
	fallbacks := int64(50)
	for {
		if _, err := lim.Allow(ctx, "a"); err == nil {
			break
		}
		fallbacks++
		if time.Now().After(deadline) {
			t.Fatal("Redis did not decide again within 10 s of its restart")
		}
		time.Sleep(10 * time.Millisecond)
	}
	msgs, args := log.taken()
	if len(msgs) != 2 || msgs[1] != "INFO slidelimit: Redis decides again" {
		t.Fatalf("logged %q, want a warning, then one line when Redis decides again", msgs)
	}
	if got := args[1]["fallbacks"]; got != fallbacks {
		t.Errorf("the end of the outage reports %v fallbacks, want %d", got, fallbacks)
	}
}
