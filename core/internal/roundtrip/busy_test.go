package roundtrip

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestRunQueueMakesTheProcessBusy: goroutines waiting for a P are seen at
// once, as a burst of requests makes them, so that the goroutine holding
// Redis's reply behind them does not make Redis look silent.
func TestRunQueueMakesTheProcessBusy(t *testing.T) {
	if !hasRunnable {
		t.Skipf("this Go (%s) does not report runnable goroutines", runtime.Version())
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	defer func() { stop.Store(true); wg.Wait() }()
	for range 4 * runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
			}
		}()
	}
	for deadline := time.Now().Add(10 * time.Second); !runQueued(); {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines spin on %d Ps, and runQueued never saw one waiting", 4*runtime.GOMAXPROCS(0), runtime.GOMAXPROCS(0))
		}
		time.Sleep(time.Millisecond)
	}
	m := busyMeter{slow: slowSchedules(), stall: cpuStall(), at: time.Now()}
	if !m.busy() {
		t.Fatal("goroutines wait to run, and the meter says the process is not busy")
	}
}
