package slidelimit

import (
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/core/redistest"
)

// TestRetriedCallCountsOnce sends the same request id twice, as go-redis or
// an application does when a reply is lost, and checks it counts once.
func TestRetriedCallCountsOnce(t *testing.T) {
	rdb := redistest.Client(t)
	lim, err := New(rdb, PerMinute(5), WithPrefix(redistest.Prefix(t)), WithLimits(PerHour(50)), WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	id := newRequestID()
	for i := range 3 {
		res, err := lim.decideOne(ctx, "r", 2, id, &lim.own)
		if err != nil || !res.Allowed || res.Remaining != 3 || res.Statuses[1].Remaining != 48 {
			t.Fatalf("attempt %d of one request of cost 2 = %+v, %v, want allowed with 3 and 48 left", i+1, res, err)
		}
	}
	res, err := lim.Allow(ctx, "r")
	if err != nil || res.Remaining != 2 {
		t.Fatalf("next request = %+v, %v, want 2 left: the retried request counted once", res, err)
	}
}

func TestRequestIDsAreCompact(t *testing.T) {
	seen := map[string]bool{}
	for range 10000 {
		id := newRequestID()
		if len(id) != 8 || seen[id] {
			t.Fatalf("newRequestID() = %q: want 8 bytes, never repeated", id)
		}
		seen[id] = true
	}
}
