package slidelimit_test

import (
	"os"
	"testing"

	"github.com/slidelimit/slidelimit/core/redistest"
)

// TestMain gives the examples a Redis in REDIS_ADDR.
func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }
