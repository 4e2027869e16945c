package slidelimit

import (
	"testing"
	"time"
)

func mustSet(t *testing.T, limits ...Limit) *limitSet {
	t.Helper()
	s, err := newLimitSet(limits)
	if err != nil {
		t.Fatal(err)
	}
	return &s
}

// TestLocalLimitsForgetsLeastRecent bounds FailLocal's memory.
func TestLocalLimitsForgetsLeastRecent(t *testing.T) {
	l := newLocalLimits(1, 2)
	set := mustSet(t, Per(2, time.Minute))
	now := time.Now()
	for _, id := range []string{"a", "a", "b", "c"} {
		l.decide([]string{id}, nil, 1, newRequestID(), set, now)
	}
	if n := l.len(); n != 2 {
		t.Fatalf("remembered %d identities, want the capacity 2", n)
	}
	if res := l.decide([]string{"a"}, nil, 1, newRequestID(), set, now); !res.Allowed || res.Remaining != 1 {
		t.Fatalf("decide(a) after it was forgotten = %+v, want a fresh window", res)
	}
	if res := l.decide([]string{"c"}, nil, 1, newRequestID(), set, now); !res.Allowed || res.Remaining != 0 {
		t.Fatalf("decide(c) = %+v, want allowed with 0 left", res)
	}
	res := l.decide([]string{"c"}, nil, 1, newRequestID(), set, now.Add(10*time.Second))
	if res.Allowed || res.RetryAfter != 50*time.Second || !res.Fallback || !res.Local {
		t.Fatalf("decide(c) over the quota = %+v, want a local fallback denial for 50s", res)
	}
	if res := l.decide([]string{"c"}, nil, 1, newRequestID(), set, now.Add(time.Minute+time.Millisecond)); !res.Allowed {
		t.Fatalf("decide(c) a window later = %+v, want allowed", res)
	}
	// A share of zero admits nothing.
	zero := newLocalLimits(3, 10)
	if res := zero.decide([]string{"z"}, nil, 1, newRequestID(), set, now); res.Allowed || res.RetryAfter <= 0 {
		t.Fatalf("decide with a share of 0 = %+v, want denied", res)
	}
}

// TestLocalLimitsDecideByTheCallsLimits: each call's own limits count the
// identity's local log, and the Result describes them.
func TestLocalLimitsDecideByTheCallsLimits(t *testing.T) {
	l := newLocalLimits(2, 10)
	anon := mustSet(t, PerMinute(20).Named("anon"))
	pro := mustSet(t, PerMinute(600).Named("pro"))
	now := time.Now()
	for i := range 300 {
		res := l.decide([]string{"tenant"}, nil, 1, newRequestID(), pro, now.Add(time.Duration(i)*time.Millisecond))
		if !res.Allowed || res.Limit.Name != "pro" || len(res.Statuses) != 1 || res.Remaining != 299-i {
			t.Fatalf("call %d under pro = %+v, want admitted by pro's share of 300 with %d left", i, res, 299-i)
		}
	}
	if res := l.decide([]string{"tenant"}, nil, 1, newRequestID(), pro, now.Add(time.Second)); res.Allowed {
		t.Fatalf("call 301 under pro = %+v, want denied: the share is 300", res)
	}
	// The same identity under another plan counts the same log.
	if res := l.decide([]string{"tenant"}, nil, 1, newRequestID(), anon, now.Add(time.Second)); res.Allowed || res.Limit.Name != "anon" {
		t.Fatalf("a call under anon = %+v, want denied by anon", res)
	}
}

// TestLocalLimitsKeepFewEntries: admissions close together share an entry,
// so a long window with a large quota costs a few entries.
func TestLocalLimitsKeepFewEntries(t *testing.T) {
	l := newLocalLimits(1, 10)
	day := mustSet(t, PerDay(100_000))
	now := time.Now()
	for i := range 10_000 {
		if res := l.decide([]string{"d"}, nil, 1, newRequestID(), day, now.Add(time.Duration(i)*time.Second)); !res.Allowed {
			t.Fatalf("call %d = %+v, want admitted", i, res)
		}
	}
	e := l.entry("d")
	if n := len(e.logs[0].units); n > localSlots+1 {
		t.Fatalf("the log holds %d entries for 10,000 admissions, want at most %d", n, localSlots+1)
	}
	res := l.decide([]string{"d"}, nil, 1, "", day, now.Add(10_000*time.Second))
	if res.Remaining != 90_000 {
		t.Fatalf("Remaining after 10,000 = %d, want 90,000", res.Remaining)
	}
}

// TestLocalRequestsCountOnlyCallsThatCountThem: under FailLocal a limit
// that counts requests counts those of calls with such a limit, as Redis's
// log of requests holds only theirs, not every admission of the identity
// (the model checker's seed 1241559: a first ForRequests call denied
// within its share after calls by cost).
func TestLocalRequestsCountOnlyCallsThatCountThem(t *testing.T) {
	l := newLocalLimits(1, 10)
	now := time.Now()
	byCost := mustSet(t, Per(1000, 24*time.Hour), Per(600, time.Minute))
	for range 3 {
		if res := l.decide([]string{"b"}, nil, 7, newRequestID(), byCost, now); !res.Allowed {
			t.Fatalf("decide by cost = %+v, want allowed", res)
		}
	}
	perRequest := mustSet(t, Per(1, time.Second).ForRequests(), Per(600, time.Minute))
	res := l.decide([]string{"b"}, nil, 7, newRequestID(), perRequest, now)
	if !res.Allowed || res.Statuses[0].Remaining != 0 || res.Statuses[1].Remaining != 600-28 {
		t.Fatalf("first call with a limit of 1 request a second = %+v, want allowed, 0 and 572 left", res)
	}
	if res := l.decide([]string{"b"}, nil, 1, newRequestID(), perRequest, now); res.Allowed {
		t.Fatalf("second call with a limit of 1 request a second = %+v, want denied", res)
	}
}

// TestLocalUnitsCountOnlyCallsThatCountThem: a call whose only limit at a
// level counts requests writes no units there, as Redis writes only that
// level's log of requests; a later call limited by units must not count
// it. The model checker found it (seeds 12902777 and 12902871): a call
// under 5 requests per 10 s, then one under 3 units a second over three
// replicas (a share of 1), denied with nothing counted.
func TestLocalUnitsCountOnlyCallsThatCountThem(t *testing.T) {
	l := newLocalLimits(3, 10)
	now := time.Now()
	perRequest := mustSet(t, Per(5, 10*time.Second).ForRequests())
	if res := l.decide([]string{"a"}, nil, 1, newRequestID(), perRequest, now); !res.Allowed {
		t.Fatalf("decide under a limit of requests = %+v, want allowed", res)
	}
	byCost := mustSet(t, Per(3, time.Second), Per(5, 10*time.Second))
	res := l.decide([]string{"a"}, nil, 1, newRequestID(), byCost, now)
	if !res.Allowed || res.Statuses[0].Remaining != 0 || res.Statuses[1].Remaining != 0 {
		t.Fatalf("first call by units after a call counted in requests = %+v, want allowed with 0 left of shares of 1", res)
	}
	if res := l.decide([]string{"a"}, nil, 1, newRequestID(), byCost, now); res.Allowed {
		t.Fatalf("second call by units = %+v, want denied", res)
	}
	// The requests' share (5/3 = 1) still holds the first call.
	if res := l.decide([]string{"a"}, nil, 1, newRequestID(), perRequest, now); res.Allowed {
		t.Fatalf("second call under a limit of requests = %+v, want denied", res)
	}
}

// TestLocalShortWindowBesideALongOne: under FailLocal a plan's short
// window counts at its own resolution, not its long window's. The local
// log coalesced admissions at a 64th of the longest window (22.5 minutes
// beside a day), so three calls spread over 0.8 s counted as one second's
// three for 22.5 minutes, and a 3/s limit denied within its share (the
// model checker's seed 9261546).
func TestLocalShortWindowBesideALongOne(t *testing.T) {
	l := newLocalLimits(1, 10)
	plan := mustSet(t, Per(3, time.Second), Per(1000, 24*time.Hour))
	now := time.Now()
	for i := range 3 {
		if res := l.decide([]string{"t"}, nil, 1, newRequestID(), plan, now.Add(time.Duration(i)*400*time.Millisecond)); !res.Allowed {
			t.Fatalf("call %d = %+v, want admitted", i, res)
		}
	}
	// At 1.2 s the last second holds the calls of 0.4 s and 0.8 s.
	res := l.decide([]string{"t"}, nil, 1, newRequestID(), plan, now.Add(1200*time.Millisecond))
	if !res.Allowed {
		t.Fatalf("a call 1.2 s after the first of three 0.4 s apart under %v = %+v, want admitted", plan.limits, res)
	}
	if got := res.Statuses[1].Remaining; got != 996 {
		t.Errorf("the day's remaining = %d, want 996", got)
	}
	// A window first counted now starts from what the longest log holds.
	week := mustSet(t, Per(10, 7*24*time.Hour))
	if res := l.decide([]string{"t"}, nil, 1, "", week, now.Add(1300*time.Millisecond)); res.Remaining != 6 {
		t.Errorf("a peek under %v after 4 admissions = %+v, want 6 remaining", week.limits, res)
	}
}
