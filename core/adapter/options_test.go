package adapter_test

import (
	"testing"

	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/adapter"
)

// The types of an adapter over requests of type string.
type (
	deny   func(string)
	fail   func(error)
	option func(*adapter.Options[string, deny, fail])
)

func TestOptionsKeepDefaultsOnNil(t *testing.T) {
	var set adapter.Set[option, string, deny, fail]
	key := func(string) (string, error) { return "k", nil }
	o := adapter.NewOptions(adapter.Options[string, deny, fail]{Key: key, Deny: func(string) {}, Fail: func(error) {}},
		[]option{set.Key(nil), set.Deny(nil), set.Fail(nil), set.Hook(nil), nil, set.RefundFailed()})
	if o.Key == nil || o.Deny == nil || o.Fail == nil || !o.RefundFailed || o.RefundSuccessful {
		t.Errorf("NewOptions with nil options = %+v, want the defaults kept and RefundFailed set", o)
	}
}

func TestTreeOptionReachesTheFlow(t *testing.T) {
	var set adapter.Set[option, string, deny, fail]
	tree := func(string) (string, []slidelimit.Level, error) { return "acme", nil, nil }
	o := adapter.NewOptions(adapter.Options[string, deny, fail]{}, []option{set.Tree(tree)})
	if f := o.Flow("testlimit", nil); f.Tree == nil {
		t.Errorf("Flow of Options with Tree set has no Tree, want it")
	}
}

func TestWithDefaults(t *testing.T) {
	type config struct {
		Name  string
		Limit int
		Skip  func() bool
		on    bool // unexported: left alone
	}
	defaults := config{Name: "d", Limit: 5, Skip: func() bool { return true }, on: true}
	got := adapter.WithDefaults(config{Limit: 7}, defaults)
	if got.Name != "d" || got.Limit != 7 || got.Skip == nil || got.on {
		t.Errorf("WithDefaults = %+v, want Name from the defaults, Limit kept, Skip set, on untouched", got)
	}
}
