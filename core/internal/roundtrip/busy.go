package roundtrip

import (
	"bytes"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"sync/atomic"
	"time"
)

// busyMeter tells whether this process or its host was too busy, since the
// meter was made or last asked, for a silence of Redis to mean anything
// (see trip.wait):
//
//   - a goroutine of this process waited busyStep or more to run (the
//     runtime's /sched/latencies histogram): the goroutine that reads
//     Redis's reply may have been one of them;
//   - on Linux, tasks waited for a CPU (/proc/pressure/cpu, "some") for at
//     least half of the time: a Redis on this host, or this process, may
//     have been one of them;
//   - more goroutines wait to run right now than the process has Ps
//     (/sched/goroutines/runnable, from Go 1.26): the goroutine holding
//     Redis's reply may be queued behind them.
//
// The third is the one that sees a burst of this process's own goroutines:
// the other two are slow to move (Linux updates the stall total every
// couple of seconds, and the runtime samples one scheduling in eight), and
// in a burst of a thousand requests they were seen unchanged over 10 ms
// windows with hundreds of goroutines waiting to run.
//
// Neither can make a dead Redis look alive for long: the allowance it earns
// a call is bounded by busyAllowance.
type busyMeter struct {
	slow  uint64    // slow schedules so far
	stall int64     // µs of CPU stall so far; -1 if unknown
	at    time.Time // when slow and stall were read
}

func newBusyMeter() *busyMeter {
	return &busyMeter{slow: slowSchedules(), stall: cpuStall(), at: time.Now()}
}

// recentBusy is a reading at most busyFresh old, shared by every round trip
// so that starting one costs no reading (tens of µs) most of the time.
var recentBusy atomic.Pointer[busyMeter]

// busyFresh is how old recentBusy may be.
const busyFresh = 50 * time.Millisecond

// recentMeter returns a meter that measures from a reading taken at most
// busyFresh ago: its window covers the time since now, and a little
// before. It allocates nothing while the shared reading is fresh.
func recentMeter() busyMeter {
	m := recentBusy.Load()
	if m == nil || time.Since(m.at) > busyFresh {
		m = newBusyMeter()
		recentBusy.Store(m)
	}
	return *m
}

// busy reports whether the process or host was busy since the last call.
func (m *busyMeter) busy() bool {
	slow, stall, now := slowSchedules(), cpuStall(), time.Now()
	busy := slow != m.slow ||
		stall >= 0 && m.stall >= 0 && time.Duration(stall-m.stall)*time.Microsecond*2 >= now.Sub(m.at) ||
		runQueued()
	m.slow, m.stall, m.at = slow, stall, now
	return busy
}

// schedLatency is the runtime metric of how long goroutines wait to run.
const schedLatency = "/sched/latencies:seconds"

// slowSchedules returns how many goroutines of this process have waited
// busyStep or more to run since it started (a sampled count).
func slowSchedules() uint64 {
	sample := []metrics.Sample{{Name: schedLatency}}
	metrics.Read(sample)
	if sample[0].Value.Kind() != metrics.KindFloat64Histogram {
		return 0
	}
	h := sample[0].Value.Float64Histogram()
	var n uint64
	for i, c := range h.Counts {
		if h.Buckets[i] >= busyStep.Seconds() {
			n += c
		}
	}
	return n
}

// runnableMetric is the runtime metric of how many goroutines wait to run,
// and whether this Go has it (1.26 and later).
const runnableMetric = "/sched/goroutines/runnable:goroutines"

var hasRunnable = func() bool {
	for _, d := range metrics.All() {
		if d.Name == runnableMetric {
			return true
		}
	}
	return false
}()

// runQueued reports whether more goroutines of this process wait to run
// than it has Ps to run them: a goroutine made ready now, the one that
// reads Redis's reply among them, may wait its turn behind the others.
// It is false where the runtime does not tell.
func runQueued() bool {
	if !hasRunnable {
		return false
	}
	sample := []metrics.Sample{{Name: runnableMetric}}
	metrics.Read(sample)
	if sample[0].Value.Kind() != metrics.KindUint64 {
		return false
	}
	return sample[0].Value.Uint64() > uint64(runtime.GOMAXPROCS(0))
}

// cpuStall returns the host's total time, in µs, in which some task waited
// for a CPU, or -1 where Linux's pressure stall information is missing.
func cpuStall() int64 {
	b, err := os.ReadFile("/proc/pressure/cpu")
	if err != nil {
		return -1
	}
	line, _, _ := bytes.Cut(b, []byte("\n")) // some avg10=… total=N
	_, total, ok := bytes.Cut(line, []byte("total="))
	if !bytes.HasPrefix(line, []byte("some")) || !ok {
		return -1
	}
	n, err := strconv.ParseInt(string(bytes.TrimSpace(total)), 10, 64)
	if err != nil {
		return -1
	}
	return n
}
