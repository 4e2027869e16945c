package slidelimit

import (
	"strconv"
	"testing"
	"time"
)

// TestDenyCacheIsBounded stores far more denials than the cache holds.
func TestDenyCacheIsBounded(t *testing.T) {
	c := newDenyCache(64)
	now := time.Now()
	denied := Result{RetryAfter: time.Minute, Statuses: []Status{{RetryAfter: time.Minute}}}
	for i := range 10_000 {
		c.store("id"+strconv.Itoa(i), "", 1, now, denied)
	}
	total := 0
	for i := range c.shards {
		total += len(c.shards[i].entries)
	}
	if total > 64 {
		t.Errorf("cache of size 64 holds %d entries after 10,000 denials", total)
	}
	if _, ok := c.lookup("id9999", "", 1, now.Add(time.Second)); !ok {
		t.Errorf("lookup of the newest denial missed")
	}
	if _, ok := c.lookup("id9999", "", 1, now.Add(time.Minute)); ok {
		t.Errorf("lookup after RetryAfter hit, want a miss")
	}
	if newDenyCache(0) != nil {
		t.Errorf("newDenyCache(0) != nil, want no cache")
	}
}
