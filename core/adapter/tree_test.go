package adapter_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/adapter"
)

// errNoToken is a tree function's error.
var errNoToken = errors.New("no token")

// levels is a tree of an organisation, a team and an API key.
func levels(key string) []slidelimit.Level {
	return []slidelimit.Level{
		{Limits: []slidelimit.Limit{slidelimit.PerMinute(10).Named("org")}},
		{Identity: "team:ml", Limits: []slidelimit.Limit{slidelimit.PerMinute(5).Named("team")}},
		{Identity: "key:" + key, Limits: []slidelimit.Limit{slidelimit.PerMinute(2).Named("key")}},
	}
}

func TestTreeFailsBeforeRedisAsAKeyError(t *testing.T) {
	for _, tt := range []struct {
		name   string
		tree   func(call) (string, []slidelimit.Level, error)
		target error
		msg    string
	}{
		{"error", func(call) (string, []slidelimit.Level, error) { return "", nil, errNoToken }, errNoToken,
			"testlimit: key: no token"},
		{"empty tenant", func(call) (string, []slidelimit.Level, error) { return "", levels("k"), nil }, slidelimit.ErrInvalidKey,
			"testlimit: key: slidelimit: invalid key: empty tenant"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var errs []error
			f, _, n := newFlow(t, &errs, slidelimit.PerMinute(100))
			f.Tree = tt.tree
			d := f.Decide(t.Context(), call{id: "ignored", cost: 1})
			var ke *adapter.KeyError
			if d.Verdict != adapter.Fail || !errors.As(d.Err, &ke) || !errors.Is(d.Err, tt.target) || !strings.HasPrefix(d.Err.Error(), tt.msg) {
				t.Errorf("Decide = %v, %v; want Fail with a *KeyError %q wrapping %v", d.Verdict, d.Err, tt.msg, tt.target)
			}
			if len(errs) != 1 || !errors.Is(errs[0], d.Err) {
				t.Errorf("hook got %v, want the decision's error once", errs)
			}
			if got := n.n.Load(); got != 0 {
				t.Errorf("Redis ran %d scripts, want none", got)
			}
		})
	}
}

func TestTreeTakesThePlaceOfKeyAndLimits(t *testing.T) {
	var errs []error
	f, _, _ := newFlow(t, &errs, slidelimit.PerMinute(100))
	f.Key = func(call) (string, error) { return "", errNoToken }               // not asked
	f.Limits = func(call) []slidelimit.Limit { return []slidelimit.Limit{{}} } // not asked: invalid
	f.Tree = func(c call) (string, []slidelimit.Level, error) { return "org:acme", levels(c.id), nil }
	for i, want := range []struct {
		verdict adapter.Verdict
		bound   string
	}{{adapter.Admit, "key"}, {adapter.Admit, "key"}, {adapter.Deny, "key"}} {
		d := f.Decide(t.Context(), call{id: "k1", cost: 1})
		if d.Verdict != want.verdict || d.Result.Limit.String() != want.bound || d.Identity != "org:acme" {
			t.Errorf("Decide #%d = %v by %s for %q (%v), want %v by %s for org:acme", i+1, d.Verdict, d.Result.Limit, d.Identity, d.Err,
				want.verdict, want.bound)
		}
		var got []string
		for _, s := range d.Result.Statuses {
			got = append(got, s.Level+"="+s.Limit.String())
		}
		if strings.Join(got, ",") != "=org,team:ml=team,key:k1=key" {
			t.Errorf("Decide #%d: statuses %v, want every level's limits in order", i+1, got)
		}
	}
	if len(errs) != 0 {
		t.Errorf("hook got %v, want nothing", errs)
	}
}

// TestTreePlaceInFlightAtALevel holds a team's one place in flight through
// Pend, for another key of the team to be denied, until End releases it.
func TestTreePlaceInFlightAtALevel(t *testing.T) {
	var errs []error
	f, _, _ := newFlow(t, &errs, slidelimit.PerMinute(100))
	f.Tree = func(c call) (string, []slidelimit.Level, error) {
		lv := levels(c.id)
		lv[1].Limits = append(lv[1].Limits[:1:1], slidelimit.InFlight(1, time.Minute).Named("team-running"))
		return "org:acme", lv, nil
	}
	ctx := t.Context()
	first := call{id: "k1", cost: 1}
	d := f.Decide(ctx, first)
	p := f.Pend(ctx, first, d)
	if d.Verdict != adapter.Admit || p == nil {
		t.Fatalf("Decide = %v (%v), Pend = %v; want Admit with a Pending", d.Verdict, d.Err, p)
	}
	if d := f.Decide(ctx, call{id: "k2", cost: 1}); d.Verdict != adapter.Deny || d.Result.Limit.String() != "team-running" {
		t.Errorf("Decide of another key while the first runs = %v by %s, want Deny by team-running", d.Verdict, d.Result.Limit)
	}
	p.End(200, nil)
	if d := f.Decide(ctx, call{id: "k2", cost: 1}); d.Verdict != adapter.Admit {
		t.Errorf("Decide of another key once the first ended = %v by %s, want Admit", d.Verdict, d.Result.Limit)
	} else {
		f.Pend(ctx, call{id: "k2", cost: 1}, d).End(200, nil)
	}
	if len(errs) != 0 {
		t.Errorf("hook got %v, want nothing", errs)
	}
}

// TestTreeLongRequestKeepsItsPlaceAtItsLevel: a request of a tree that
// runs several times the lease of its team's place in flight keeps it,
// renewed at that level while it runs, and gives it back when it ends.
func TestTreeLongRequestKeepsItsPlaceAtItsLevel(t *testing.T) {
	var errs []error
	const lease = 600 * time.Millisecond // renewed every 200 ms: slack for a loaded machine
	f, _, _ := newFlow(t, &errs, slidelimit.PerMinute(100))
	f.Tree = func(c call) (string, []slidelimit.Level, error) {
		lv := levels(c.id)
		lv[1].Limits = []slidelimit.Limit{slidelimit.InFlight(1, lease).Named("team-running")}
		return "org:acme", lv, nil
	}
	p := admit(t, f, call{"k1", 1})
	for range 3 { // three leases' time, and still in flight
		time.Sleep(lease)
		if v := verdict(t, f, call{"k2", 1}); v != adapter.Deny {
			t.Fatalf("another key of the team while a long request runs = %v, want Deny", v)
		}
	}
	p.End(200, nil)
	if v := verdict(t, f, call{"k2", 1}); v != adapter.Admit {
		t.Errorf("another key of the team after the long request ended = %v, want Admit", v)
	}
	if len(errs) != 0 {
		t.Errorf("hook got %v, want nothing", errs)
	}
}
