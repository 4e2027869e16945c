package roundtrip

import (
	"errors"
	"testing"
	"time"
)

// TestBreakerIsPerNode fails one node: only its circuit opens.
func TestBreakerIsPerNode(t *testing.T) {
	b := newBreaker(2, time.Minute)
	b.record("a", 1, healthFailed, false)
	b.record("a", 1, healthFailed, false) // the same round trip counts once
	if _, err := b.admit("a"); err != nil {
		t.Fatalf("after one failed round trip admit(a) = %v, want closed", err)
	}
	b.record("a", 2, healthFailed, false)
	if _, err := b.admit("a"); !errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("after two failed round trips admit(a) = %v, want ErrCircuitOpen", err)
	}
	if probe, err := b.admit("b"); err != nil || probe {
		t.Fatalf("admit(b) = %v, %v, want closed: b never failed", probe, err)
	}
	b.record("b", 3, healthOK, false)
	if _, err := b.admit("a"); !errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("after b answered admit(a) = %v, want still open", err)
	}
	if newBreaker(0, time.Second) != nil {
		t.Error("newBreaker(0, …) is enabled, want nil")
	}
}

// TestBreakerCountsRoundTripsEndingOutOfOrder: round trips in flight
// together fail in any order, and each counts once, so the breaker opens
// after as many failed round trips as it is set to, not as many waves.
func TestBreakerCountsRoundTripsEndingOutOfOrder(t *testing.T) {
	b := newBreaker(4, time.Minute)
	for _, rt := range []uint64{13, 11, 13, 12, 11} {
		b.record("a", rt, healthFailed, false)
	}
	if _, err := b.admit("a"); err != nil {
		t.Fatalf("after 3 failed round trips (5 calls) admit = %v, want closed", err)
	}
	b.record("a", 10, healthFailed, false)
	if _, err := b.admit("a"); !errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("after round trips 13, 11, 12 and 10 failed admit = %v, want ErrCircuitOpen", err)
	}
}
