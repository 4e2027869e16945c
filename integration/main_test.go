package integration

import (
	"os"
	"testing"

	"github.com/slidelimit/slidelimit/core/redistest"
)

// TestMain gives the example a Redis in REDIS_ADDR. Helper processes
// (TestHelperProcess) pass through it too, which costs them nothing under
// the harness, where SLIDELIMIT_REDIS_ADDR is set.
func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }
