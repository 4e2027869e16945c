package adapter_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/adapter"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// call is a request of the flows under test: an identity and a cost.
type call struct {
	id   string
	cost int
}

// scripts counts the scripts a client runs in Redis: the round trips of
// the limiter's decisions and settlements.
type scripts struct{ n atomic.Int64 }

func (s *scripts) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *scripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if name := cmd.Name(); (name == "evalsha" || name == "eval") && !redis.HasErrorPrefix(err, "NOSCRIPT") {
			s.n.Add(1)
		}
		return err
	}
}

func (s *scripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// newFlow returns a flow over calls, limited by a limiter of limits on a
// client of its own, whose scripts it counts; errors go to errs.
func newFlow(t *testing.T, errs *[]error, limits ...slidelimit.Limit) (*adapter.Flow[call], *slidelimit.Limiter, *scripts) {
	t.Helper()
	rdb := redistest.Client(t)
	n := &scripts{}
	rdb.AddHook(n)
	lim, err := slidelimit.New(rdb, limits[0], slidelimit.WithLimits(limits[1:]...),
		slidelimit.WithPrefix(redistest.Prefix(t)), slidelimit.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	f := &adapter.Flow[call]{
		Name:    "testlimit",
		Limiter: lim,
		Key:     func(c call) (string, error) { return c.id, nil },
		Cost:    func(c call) int { return c.cost },
		Hook:    func(_ context.Context, _ call, err error) { *errs = append(*errs, err) },
	}
	return f, lim, n
}

// admit decides c, which must be admitted, and returns its Pending.
func admit(t *testing.T, f *adapter.Flow[call], c call) *adapter.Pending[call] {
	t.Helper()
	d := f.Decide(t.Context(), c)
	if d.Verdict != adapter.Admit {
		t.Fatalf("Decide(%+v) = %v, %v; want Admit", c, d.Verdict, d.Err)
	}
	return f.Pend(t.Context(), c, d)
}

// verdict returns what f decides for c, recording nothing that lasts: an
// admitted request is refunded at once.
func verdict(t *testing.T, f *adapter.Flow[call], c call) adapter.Verdict {
	t.Helper()
	d := f.Decide(t.Context(), c)
	if d.Verdict == adapter.Admit {
		_ = f.Limiter.Refund(context.Background(), d.Result)
	}
	return d.Verdict
}

// remaining returns what Peek says is left under each of lim's limits.
func remaining(t *testing.T, lim *slidelimit.Limiter, id string) []int {
	t.Helper()
	res, err := lim.Peek(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, s := range res.Statuses {
		out = append(out, s.Remaining)
	}
	return out
}

// usage is a settle function reading a decimal cost from the response's
// X-Usage field.
func usage(_ call, r adapter.Response) (int, bool) {
	var n int
	for _, c := range r.Header.Get("X-Usage") {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, r.Header.Get("X-Usage") != ""
}

func header(usage string) http.Header {
	h := http.Header{}
	if usage != "" {
		h.Set("X-Usage", usage)
	}
	return h
}

// TestEndSettlesAndReleasesInOneRoundTrip: a request admitted at its
// estimate holds its place in flight until it ends, and its end settles
// the actual cost and releases the place in one round trip.
func TestEndSettlesAndReleasesInOneRoundTrip(t *testing.T) {
	var errs []error
	f, lim, n := newFlow(t, &errs, slidelimit.PerMinute(100).Named("tpm"), slidelimit.InFlight(1, time.Minute).Named("inflight"))
	f.Settle = usage
	p := admit(t, f, call{"k", 40})
	if p == nil || !p.Captures() {
		t.Fatalf("Pend = %v, want a Pending that captures", p)
	}
	if v := verdict(t, f, call{"k", 1}); v != adapter.Deny {
		t.Fatalf("a second request while the first is in flight = %v, want Deny", v)
	}
	before := n.n.Load()
	p.End(http.StatusOK, header("25"))
	if got := n.n.Load() - before; got != 1 {
		t.Errorf("End ran %d scripts, want 1", got)
	}
	if got := remaining(t, lim, "k"); got[0] != 75 || got[1] != 1 {
		t.Errorf("after settling 40 to 25: remaining %v, want [75 1]", got)
	}
	p.End(http.StatusOK, header("1")) // a second End changes nothing
	p.Abort()
	if got := remaining(t, lim, "k"); got[0] != 75 {
		t.Errorf("after ending twice: remaining %v, want 75 left", got)
	}
	if len(errs) != 0 {
		t.Errorf("hook got %v, want nothing", errs)
	}
}

// TestEndWithoutUsageKeepsTheEstimate: a response the settle function
// knows nothing of keeps the estimate, and only releases; without places
// in flight, an actual cost equal to the estimate costs no round trip.
func TestEndWithoutUsageKeepsTheEstimate(t *testing.T) {
	var errs []error
	f, lim, n := newFlow(t, &errs, slidelimit.PerMinute(100), slidelimit.InFlight(1, time.Minute))
	f.Settle = usage
	admit(t, f, call{"k", 30}).End(http.StatusOK, nil)
	if got := remaining(t, lim, "k"); got[0] != 70 || got[1] != 1 {
		t.Errorf("after a response without usage: remaining %v, want [70 1]", got)
	}

	g, lim2, n2 := newFlow(t, &errs, slidelimit.PerMinute(100))
	g.Settle = usage
	p := admit(t, g, call{"k", 30})
	before := n2.n.Load()
	p.End(http.StatusOK, header("30"))
	if got := n2.n.Load() - before; got != 0 {
		t.Errorf("settling to the estimate, with no place in flight, ran %d scripts, want 0", got)
	}
	if got := remaining(t, lim2, "k"); got[0] != 70 {
		t.Errorf("remaining %v, want 70", got)
	}
	_ = n
}

// TestRefundByStatusIsASettleToZero: a request a refund setting gives back
// is refunded, whatever its usage says, and its place released, in one
// round trip; one it does not is settled.
func TestRefundByStatusIsASettleToZero(t *testing.T) {
	var errs []error
	f, lim, n := newFlow(t, &errs, slidelimit.PerMinute(100), slidelimit.InFlight(1, time.Minute))
	f.Settle, f.RefundFailed = usage, true
	p := admit(t, f, call{"k", 40})
	before := n.n.Load()
	p.End(http.StatusBadGateway, header("25"))
	if got := n.n.Load() - before; got != 1 {
		t.Errorf("End of a failed request ran %d scripts, want 1", got)
	}
	if got := remaining(t, lim, "k"); got[0] != 100 || got[1] != 1 {
		t.Errorf("after refunding a failed request: remaining %v, want [100 1]", got)
	}
	admit(t, f, call{"k", 40}).End(http.StatusOK, header("25"))
	if got := remaining(t, lim, "k"); got[0] != 75 {
		t.Errorf("after settling a successful one: remaining %v, want 75", got)
	}
}

// TestAbortReleasesAndKeepsTheEstimate: a handler that panics releases its
// place in flight and keeps its estimate; End after Abort changes nothing.
func TestAbortReleasesAndKeepsTheEstimate(t *testing.T) {
	var errs []error
	f, lim, _ := newFlow(t, &errs, slidelimit.PerMinute(100), slidelimit.InFlight(1, time.Minute))
	f.Settle = usage
	func() {
		defer func() { _ = recover() }()
		p := admit(t, f, call{"k", 40})
		defer p.Abort()
		panic("handler")
	}()
	if got := remaining(t, lim, "k"); got[0] != 60 || got[1] != 1 {
		t.Errorf("after a panic: remaining %v, want [60 1]", got)
	}
}

// TestEndOutlivesTheRequestContext: a request whose client is gone still
// releases its place.
func TestEndOutlivesTheRequestContext(t *testing.T) {
	var errs []error
	f, lim, _ := newFlow(t, &errs, slidelimit.InFlight(1, time.Minute))
	ctx, cancel := context.WithCancel(t.Context())
	c := call{"k", 1}
	p := f.Pend(ctx, c, f.Decide(ctx, c))
	cancel()
	p.End(http.StatusOK, nil)
	if got := remaining(t, lim, "k"); got[0] != 1 {
		t.Errorf("after the end of a request whose client left: remaining %v, want 1", got)
	}
	if len(errs) != 0 {
		t.Errorf("hook got %v, want nothing", errs)
	}
}

// TestHoldEndsAtTheLaterPart: a body sent after the handler returned keeps
// the place until it ends, and is settled from then.
func TestHoldEndsAtTheLaterPart(t *testing.T) {
	var errs []error
	f, lim, _ := newFlow(t, &errs, slidelimit.PerMinute(100), slidelimit.InFlight(1, time.Minute))
	f.Settle = func(_ call, r adapter.Response) (int, bool) { return len(r.Body), r.Status == http.StatusOK }
	p := admit(t, f, call{"k", 40})
	done := p.Hold()
	p.End(http.StatusOK, nil)
	if got := remaining(t, lim, "k"); got[1] != 0 {
		t.Fatalf("after the handler, before the body's end: in flight left %d, want 0", got[1])
	}
	_, _ = p.Write([]byte("0123456789"))
	done()
	done()
	if got := remaining(t, lim, "k"); got[0] != 90 || got[1] != 1 {
		t.Errorf("after the body's end: remaining %v, want [90 1]", got)
	}
}

// TestPendOwesNothing: a request that holds no place, under a flow with
// neither refund nor settle function, or a fallback that holds nothing,
// has no Pending; a nil Pending does nothing.
func TestPendOwesNothing(t *testing.T) {
	var errs []error
	f, _, _ := newFlow(t, &errs, slidelimit.PerMinute(100))
	c := call{"k", 1}
	if p := f.Pend(t.Context(), c, f.Decide(t.Context(), c)); p != nil {
		t.Errorf("Pend of a plain request = %v, want nil", p)
	}
	fallback := adapter.Decision{Verdict: adapter.Admit, Result: slidelimit.Result{Allowed: true, Fallback: true}}
	f.Settle = usage
	if p := f.Pend(t.Context(), c, fallback); p != nil {
		t.Errorf("Pend of a fail-open fallback = %v, want nil", p)
	}
	var p *adapter.Pending[call]
	_, _ = p.Write([]byte("x"))
	p.Hold()()
	p.End(http.StatusOK, nil)
	p.Abort()
	if p.Captures() {
		t.Error("a nil Pending captures")
	}
}

// TestFailLocalReleasesItsPlaces: a request FailLocal admitted while Redis
// is down holds its place in the process, and its end releases it.
func TestFailLocalReleasesItsPlaces(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	lim, err := slidelimit.New(rdb, slidelimit.InFlight(1, time.Minute), slidelimit.WithPrefix(redistest.Prefix(t)),
		slidelimit.WithFailurePolicy(slidelimit.FailLocal), slidelimit.WithBreaker(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	var errs []error
	f := &adapter.Flow[call]{Name: "testlimit", Limiter: lim, Key: func(c call) (string, error) { return c.id, nil },
		Settle: usage, Hook: func(_ context.Context, _ call, err error) { errs = append(errs, err) }}
	srv.Stop()
	c := call{"k", 1}
	d := f.Decide(t.Context(), c)
	if d.Verdict != adapter.Admit || !d.Result.Local {
		t.Fatalf("Decide with Redis down = %v %+v, want a local admission", d.Verdict, d.Result)
	}
	p := f.Pend(t.Context(), c, d)
	if p == nil || p.Captures() {
		t.Fatalf("Pend of a local admission = %v, want one that releases and captures nothing", p)
	}
	if v := f.Decide(t.Context(), c).Verdict; v != adapter.Deny {
		t.Fatalf("a second request while the first holds the local place = %v, want Deny", v)
	}
	p.End(http.StatusOK, header("5"))
	if v := f.Decide(t.Context(), c).Verdict; v != adapter.Admit {
		t.Errorf("a request after the release = %v, want Admit", v)
	}
	for _, err := range errs {
		if !errors.Is(err, slidelimit.ErrUnavailable) {
			t.Errorf("hook got %v, want only Redis failures", err)
		}
	}
}

// TestLongRequestKeepsItsPlace: a request that runs several times its
// lease keeps its place in flight, renewed while it runs, and gives it
// back when it ends.
func TestLongRequestKeepsItsPlace(t *testing.T) {
	var errs []error
	const lease = 600 * time.Millisecond // renewed every 200 ms: slack for a loaded machine
	f, _, n := newFlow(t, &errs, slidelimit.InFlight(1, lease))
	p := admit(t, f, call{"k", 1})
	before := n.n.Load()
	for range 3 { // three leases' time, and still in flight
		time.Sleep(lease)
		if v := verdict(t, f, call{"k", 1}); v != adapter.Deny {
			t.Fatalf("a second request while a long one runs = %v, want Deny", v)
		}
	}
	if renewals := n.n.Load() - before - 3; renewals < 3 {
		t.Errorf("a request of three leases renewed %d times, want at least 3", renewals)
	}
	p.End(http.StatusOK, nil)
	if v := verdict(t, f, call{"k", 1}); v != adapter.Admit {
		t.Errorf("a request after the long one ended = %v, want Admit", v)
	}
	settled := n.n.Load()
	time.Sleep(lease)
	if got := n.n.Load() - settled; got != 0 {
		t.Errorf("%d scripts ran after the request ended, want no renewal", got)
	}
	if len(errs) != 0 {
		t.Errorf("hook got %v, want nothing", errs)
	}
}
