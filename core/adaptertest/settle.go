package adaptertest

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// settle admits requests at an estimate (their cost) and settles each to
// the usage its response reports, a whole body's or a stream's: the next
// request's remaining count shows what was settled. A response with no
// usage keeps the estimate; a failed one that a refund gives back is
// refunded whatever its usage.
func settle(t *testing.T, a Adapter) {
	for _, refund := range []bool{false, true} {
		name := "settled"
		if refund {
			name = "refund first"
		}
		t.Run(name, func(t *testing.T) {
			srv := a(t, Settings{Limiter: NewLimiter(t, redistest.Client(t), slidelimit.Per(100, time.Minute)),
				CostHeader: "X-Cost", Settle: true, RefundFailed: refund})
			send := func(cost, usage int, stream bool, status int) Response {
				t.Helper()
				h := http.Header{"X-Cost": {strconv.Itoa(cost)}}
				return srv(t, Request{Peer: peer4, Path: "/a", Header: h, Usage: usage, Stream: stream, Status: status})
			}
			left := 100
			for i, tt := range []struct {
				what                string
				cost, usage, status int
				stream              bool
				counts              int // what the request counts once it has ended
			}{
				{"a body of 25 units, admitted at 40", 40, 25, 200, false, 25},
				{"a body without usage, admitted at 10", 10, 0, 200, false, 10},
				{"a stream of 5 units, admitted at 30", 30, 5, 200, true, 5},
				{"a stream without usage, admitted at 3", 3, 0, 200, true, 3},
				{"a body of 20 units, admitted at 1", 1, 20, 200, false, 20},
				{"a failed body of 7 units, admitted at 9", 9, 7, 500, false, map[bool]int{false: 7, true: 0}[refund]},
			} {
				if r := send(tt.cost, tt.usage, tt.stream, tt.status); r.Status != tt.status {
					t.Fatalf("request %d, %s = %d, want %d", i+1, tt.what, r.Status, tt.status)
				}
				left -= tt.counts
				r := send(1, 1, false, 200) // settled to its estimate: counts 1
				want := strconv.Itoa(left - 1)
				if got := r.Header.Get(slidelimit.FieldXRateLimitRemaining); got != want {
					t.Errorf("after %s: remaining %q, want %q", tt.what, got, want)
				}
				left--
			}
		})
	}
}

// inFlight holds a request in flight under a limit of one: a second one is
// denied while it runs, whether its body is one piece or a stream under
// way, and admitted once it has ended, failed or not, settled or not.
func inFlight(t *testing.T, a Adapter) {
	for _, settle := range []bool{false, true} {
		for _, stream := range []bool{false, true} {
			name := map[bool]string{false: "body", true: "stream"}[stream] + map[bool]string{false: "", true: ", settled"}[settle]
			t.Run(name, func(t *testing.T) {
				lim := NewLimiter(t, redistest.Client(t), slidelimit.InFlight(1, time.Minute), slidelimit.WithLimits(slidelimit.Per(100, time.Minute)))
				srv := a(t, Settings{Limiter: lim, Settle: settle})
				for i, status := range []int{http.StatusOK, http.StatusInternalServerError} {
					gate := NewGate(t)
					done := make(chan Response, 1)
					go func() {
						done <- srv(t, Request{Peer: peer4, Path: "/a", Usage: 2, Stream: stream, Gate: gate, Status: status})
					}()
					select {
					case <-gate.Entered():
					case r := <-done:
						t.Fatalf("round %d: the held request ended before its handler was reached: %d", i+1, r.Status)
					case <-time.After(10 * time.Second):
						t.Fatalf("round %d: the held request did not reach its handler in 10s", i+1)
					}
					if r := get(t, srv, "/a"); r.Status != http.StatusTooManyRequests {
						t.Errorf("round %d: a request while another is in flight = %d, want 429", i+1, r.Status)
					}
					gate.Open()
					if r := <-done; r.Status != status {
						t.Errorf("round %d: the held request = %d, want %d", i+1, r.Status, status)
					}
					if r := get(t, srv, "/a"); r.Status != http.StatusOK {
						t.Errorf("round %d: a request after the one in flight ended = %d, want 200", i+1, r.Status)
					}
				}
			})
		}
	}
}
