package slidelimit_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// outcomes records the Outcome of every decision a limiter observes.
type outcomes struct {
	mu  sync.Mutex
	got []slidelimit.Outcome
}

func (o *outcomes) observe(_ context.Context, ob slidelimit.Observation) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.got = append(o.got, ob.Outcome())
}

func (o *outcomes) list() []slidelimit.Outcome {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.got)
}

func TestShadow(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		limit := slidelimit.PerMinute(5)
		var seen outcomes
		lim, prefix := newLimiter(t, rdb, limit, slidelimit.WithShadow(), slidelimit.WithObserver(seen.observe))
		key, _ := slidelimit.Key(prefix, "s", limit)
		ctx := t.Context()
		for i := range 5 {
			if res := allow(t, lim, "s"); !res.Allowed || res.Shadow || res.Remaining != 4-i {
				t.Fatalf("Allow #%d in shadow mode = %+v, want a plain admission", i+1, res)
			}
		}
		res := allow(t, lim, "s")
		if !res.Allowed || !res.Shadow || res.Remaining != 0 || res.RetryAfter <= 0 || res.Limit != limit {
			t.Fatalf("Allow #6 in shadow mode = %+v, want Allowed and Shadow, describing the denial", res)
		}
		if n := keyUnits(t, rdb, key); n != 5 {
			t.Errorf("ZCARD after a shadow denial = %d, want 5: it must not be recorded", n)
		}
		if f := fields(slidelimit.Headers{}, res); f != "" {
			t.Errorf("headers of a shadow denial = %q, want none", f)
		}
		if err := lim.Refund(ctx, res); err != nil {
			t.Errorf("Refund(shadow) = %v, want nil", err)
		}
		if n := keyUnits(t, rdb, key); n != 5 {
			t.Errorf("ZCARD after refunding a shadow denial = %d, want 5: there was nothing to refund", n)
		}
		if res, err := lim.Peek(ctx, "s"); err != nil || !res.Allowed || !res.Shadow {
			t.Errorf("Peek in shadow mode = %+v, %v, want Allowed and Shadow", res, err)
		}
		want := []slidelimit.Outcome{"allowed", "allowed", "allowed", "allowed", "allowed", "shadow_denied", "shadow_denied"}
		if got := seen.list(); !slices.Equal(got, want) {
			t.Errorf("observed outcomes = %v, want %v", got, want)
		}

		// The same limit without shadow mode denies the sixth request.
		var plain outcomes
		strict, _ := newLimiter(t, rdb, limit, slidelimit.WithObserver(plain.observe))
		for i := range 6 {
			res := allow(t, strict, "s")
			if res.Allowed != (i < 5) || res.Shadow {
				t.Fatalf("Allow #%d without shadow mode = %+v, want Allowed %v", i+1, res, i < 5)
			}
		}
		if got := plain.list(); got[5] != slidelimit.OutcomeDenied {
			t.Errorf("observed outcomes without shadow mode = %v, want the last denied", got)
		}
	})
}

// TestShadowLeavesFailuresAlone checks that errors and the FailurePolicy's
// denials are not turned into shadow admissions.
func TestShadowLeavesFailuresAlone(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: redistest.StartServer(t).Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	var seen outcomes
	lim, _ := newLimiter(t, rdb, slidelimit.PerMinute(1), slidelimit.WithShadow(),
		slidelimit.WithFailurePolicy(slidelimit.FailClosed), slidelimit.WithObserver(seen.observe))
	if res, err := lim.Allow(t.Context(), ""); !errors.Is(err, slidelimit.ErrInvalidKey) || res.Allowed || res.Shadow {
		t.Errorf(`Allow("") in shadow mode = %+v, %v, want ErrInvalidKey and not Allowed`, res, err)
	}
	_ = rdb.Close() // every later call fails on the client side
	if res, err := lim.Allow(t.Context(), "x"); !errors.Is(err, slidelimit.ErrUnavailable) || res.Allowed || res.Shadow || !res.Fallback {
		t.Errorf("Allow with a closed client in shadow mode = %+v, %v, want a fail-closed fallback", res, err)
	}
	want := []slidelimit.Outcome{"error", "fallback_denied"}
	if got := seen.list(); !slices.Equal(got, want) {
		t.Errorf("observed outcomes = %v, want %v", got, want)
	}
}

func TestOutcome(t *testing.T) {
	unavailable := fmt.Errorf("%w: down", slidelimit.ErrUnavailable)
	tests := []struct {
		name string
		o    slidelimit.Observation
		want slidelimit.Outcome
	}{
		{"allowed", slidelimit.Observation{Result: slidelimit.Result{Allowed: true}}, slidelimit.OutcomeAllowed},
		{"denied", slidelimit.Observation{}, slidelimit.OutcomeDenied},
		{"shadow", slidelimit.Observation{Result: slidelimit.Result{Allowed: true, Shadow: true}}, slidelimit.OutcomeShadowDenied},
		{"cached", slidelimit.Observation{Result: slidelimit.Result{Cached: true}}, slidelimit.OutcomeCachedDenied},
		{"cached in shadow mode", slidelimit.Observation{Result: slidelimit.Result{Allowed: true, Shadow: true, Cached: true}}, slidelimit.OutcomeShadowDenied},
		{"fail-open", slidelimit.Observation{Result: slidelimit.Result{Allowed: true, Fallback: true}, Err: unavailable}, slidelimit.OutcomeFallbackAllowed},
		{"fail-closed", slidelimit.Observation{Result: slidelimit.Result{Fallback: true}, Err: unavailable}, slidelimit.OutcomeFallbackDenied},
		{"invalid key", slidelimit.Observation{Err: slidelimit.ErrInvalidKey}, slidelimit.OutcomeError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.o.Outcome(); got != tt.want {
				t.Errorf("Outcome() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestSeveralObservers(t *testing.T) {
	var mu sync.Mutex
	var calls []string
	record := func(name string) slidelimit.Observer {
		return func(_ context.Context, o slidelimit.Observation) {
			mu.Lock()
			defer mu.Unlock()
			calls = append(calls, name+":"+string(o.Outcome()))
		}
	}
	lim, _ := newLimiter(t, redistest.Client(t), slidelimit.Per(1, time.Minute),
		slidelimit.WithObserver(record("a")), slidelimit.WithObserver(record("b")))
	allow(t, lim, "o")
	allow(t, lim, "o")
	mu.Lock()
	defer mu.Unlock()
	want := []string{"a:allowed", "b:allowed", "a:denied", "b:denied"}
	if !slices.Equal(calls, want) {
		t.Errorf("observer calls = %v, want %v", calls, want)
	}
}
