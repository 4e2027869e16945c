package slidelimit_test

import (
	"testing"
	"time"

	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
)

func TestSmoke(t *testing.T) {
	rdb := redistest.Client(t)
	lim, err := slidelimit.New(rdb, slidelimit.Per(3, time.Second), slidelimit.WithPrefix(redistest.Prefix(t)), slidelimit.WithLimits(slidelimit.PerMinute(10)))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		r, err := lim.AllowN(t.Context(), "a{b}", 1)
		t.Logf("%+v %v", r, err)
		slidelimit.Headers{}.Write(r, func(k, v string) { t.Logf("  %s: %s", k, v) })
	}
}
