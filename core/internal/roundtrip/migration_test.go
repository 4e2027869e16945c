package roundtrip

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/core/internal/script"
)

func TestHashTag(t *testing.T) {
	for _, c := range []struct{ key, want string }{
		{"sl:{user:42}", "user:42"},
		{"sl:{user:42}:#keep", "user:42"},
		{"{a}{b}", "a"},
		{"no tag", "no tag"},
		{"empty {} tag", "empty {} tag"},
		{"open { only", "open { only"},
		{"}{x}", "x"},
	} {
		if got := hashTag(c.key); got != c.want {
			t.Errorf("hashTag(%q) = %q, want %q", c.key, got, c.want)
		}
	}
}

// TestMigrationsForgetADecidedTag: a tag answered TRYAGAIN is migrating
// until a call of it is decided, or migratingFor has passed; other tags
// never were, and the memory stays bounded.
func TestMigrationsForgetADecidedTag(t *testing.T) {
	var m migrations
	call := func(key string) *call { return &call{cmd: command(key)} }
	now := time.Now().UnixNano()
	if m.migrating(call("p:{a}"), now) {
		t.Fatal("a tag never answered TRYAGAIN is migrating")
	}
	m.tryAgain(call("p:{a}"), now)
	if !m.migrating(call("q:{a}"), now+int64(time.Second)) {
		t.Error("a tag answered TRYAGAIN a second ago is not migrating")
	}
	if m.migrating(call("p:{b}"), now) {
		t.Error("another tag is migrating")
	}
	if m.migrating(call("p:{a}"), now+int64(migratingFor)) {
		t.Errorf("a tag answered TRYAGAIN %v ago is still migrating", migratingFor)
	}
	m.decided(call("p:{a}"))
	if m.migrating(call("p:{a}"), now) {
		t.Error("a tag decided since its TRYAGAIN is still migrating")
	}
	for i := range maxMigrating + 10 {
		m.tryAgain(call(fmt.Sprintf("{t%d}", i)), now)
	}
	if n := len(m.tags); n != maxMigrating {
		t.Errorf("after %d tags answered TRYAGAIN the lane remembers %d, want at most %d", maxMigrating+10, n, maxMigrating)
	}
	m.tryAgain(call("{late}"), now+int64(migratingFor))
	if !m.migrating(call("{late}"), now+int64(migratingFor)) || len(m.tags) != 1 {
		t.Errorf("a new tag once the others expired: migrating %v, %d remembered; want true, 1", m.migrating(call("{late}"), now+int64(migratingFor)), len(m.tags))
	}
}

// TestClusterPipelinesStartWithOneKey: a Cluster pipeline's first command
// names one key, so that no node answers it TRYAGAIN (see clusterOrder):
// the batch's first call of one key, or a PTTL put before the calls.
func TestClusterPipelinesStartWithOneKey(t *testing.T) {
	two := func(key string) *call {
		return &call{cmd: append(script.NewCommand(2, 1), key, key+":#60000000", 1)}
	}
	one := func(key string) *call { return &call{cmd: command(key)} }
	for _, tc := range []struct {
		name  string
		batch []*call
		want  []int
	}{
		{"one key first", []*call{one("{a}"), two("{b}"), one("{c}")}, []int{0, 1, 2}},
		{"one key later", []*call{two("{a}"), two("{b}"), one("{c}"), one("{d}")}, []int{2, 0, 1, 3}},
		{"no call of one key", []*call{two("{a}"), two("{b}")}, []int{-1, 0, 1}},
	} {
		if got := clusterOrder(tc.batch); !slices.Equal(got, tc.want) {
			t.Errorf("%s: clusterOrder = %v, want %v", tc.name, got, tc.want)
		}
	}
}
