package model

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	stdlog "log/slog"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
)

// tester is what the harness needs of *rapid.T and *testing.T alike.
type tester interface {
	Helper()
	Logf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// testClock is the clock every limiter of a check shares (WithClock). It
// never runs slower than the wall clock, since Redis expires keys by its
// own: it reads the wall clock plus an offset that Advance only grows. While
// an operation runs it is frozen at the operation's start, so that the
// model knows the time of every decision to the microsecond.
type testClock struct {
	mu     sync.Mutex
	offset time.Duration
	frozen int64 // µs; 0 while running
	last   int64 // the latest value handed out, µs
	pinned int64 // µs: the next freeze's value, if the clock is not past it by then; 0: none
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.frozen != 0 {
		return time.UnixMicro(c.frozen)
	}
	return time.UnixMicro(c.tick())
}

func (c *testClock) tick() int64 {
	c.last = max(c.last, time.Now().Add(c.offset).UnixMicro())
	return c.last
}

// freeze stops the clock at the present and returns it, in µs: at the
// pinned instant if one is set and not yet passed, from which the clock
// then runs on.
func (c *testClock) freeze() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.frozen = c.tick()
	if c.pinned > c.frozen {
		c.offset += time.Duration(c.pinned-c.frozen) * time.Microsecond
		c.frozen, c.last = c.pinned, c.pinned
	}
	c.pinned = 0
	return c.frozen
}

// pin makes the next freeze stop the clock exactly at at (µs), so that a
// step lands on an edge the model names (a window's end, a lease's, a
// RetryAfter) to the µs: the clock still never runs slower than the wall
// clock, it jumps ahead at the freeze. It reports false, and pins
// nothing, if the clock is already past at less margin, which the time to
// the freeze may well pass.
func (c *testClock) pin(at int64, margin time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if at <= c.tick()+margin.Microseconds() {
		return false
	}
	c.pinned = at
	return true
}

func (c *testClock) unfreeze() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.frozen = 0
}

func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
}

// limiterSpec is one limiter of a check, as a user would configure it.
type limiterSpec struct {
	Process   int // which go-redis client: a process of the fleet
	Limits    []slidelimit.Limit
	Timeout   time.Duration
	Policy    slidelimit.FailurePolicy
	Replicas  int
	DenyCache bool
	Shadow    bool

	observe slidelimit.Observer // the harness's, to read each call's Observation
	logger  *stdlog.Logger      // the harness's, to read the reports of kept settlements
}

func (s limiterSpec) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "{Process: %d, Limits: %s, Timeout: %s", s.Process, planString(s.Limits), durString(s.Timeout))
	fmt.Fprintf(&b, ", Policy: slidelimit.%s", policyName(s.Policy))
	if s.Replicas > 1 {
		fmt.Fprintf(&b, ", Replicas: %d", s.Replicas)
	}
	if s.DenyCache {
		b.WriteString(", DenyCache: true")
	}
	if s.Shadow {
		b.WriteString(", Shadow: true")
	}
	b.WriteString("}")
	return b.String()
}

func policyName(p slidelimit.FailurePolicy) string {
	switch p {
	case slidelimit.FailClosed:
		return "FailClosed"
	case slidelimit.FailLocal:
		return "FailLocal"
	}
	return "FailOpen"
}

// strict reports whether a limiter's calls must never fall back while
// Redis answers: its timeout outlasts any hiccup of a loaded host.
func (s limiterSpec) strict() bool { return s.Timeout == 0 || s.Timeout >= strictTimeout }

// strictTimeout is the shortest timeout whose calls must be decided by
// Redis whenever Redis answers within a second: shorter ones may time out
// on a loaded host, and the model then holds their outcome in doubt.
const strictTimeout = time.Second

// newLimiter builds the limiter of spec on client under prefix and clock.
func newLimiter(client redis.UniversalClient, prefix string, clock func() time.Time, s limiterSpec) (*slidelimit.Limiter, error) {
	opts := []slidelimit.Option{
		slidelimit.WithPrefix(prefix),
		slidelimit.WithLimits(s.Limits[1:]...),
		slidelimit.WithTimeout(s.Timeout),
		slidelimit.WithFailurePolicy(s.Policy),
		slidelimit.WithReplicas(max(1, s.Replicas)),
	}
	if clock != nil {
		opts = append(opts, slidelimit.WithClock(clock))
	}
	if !s.DenyCache {
		opts = append(opts, slidelimit.WithDenyCache(0))
	}
	if s.Shadow {
		opts = append(opts, slidelimit.WithShadow())
	}
	if s.observe != nil {
		opts = append(opts, slidelimit.WithObserver(s.observe))
	}
	if s.logger != nil {
		opts = append(opts, slidelimit.WithLogger(s.logger))
	}
	return slidelimit.New(client, s.Limits[0], opts...)
}

// newPrefix returns a key prefix of its own for one check.
func newPrefix(mode string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "model:" + mode + ":" + hex.EncodeToString(b[:]) + ":"
}

// planString writes limits as Go.
func planString(limits []slidelimit.Limit) string {
	if limits == nil {
		return "nil"
	}
	parts := make([]string, len(limits))
	for i, l := range limits {
		parts[i] = limitString(l)
	}
	return "plan{" + strings.Join(parts, ", ") + "}"
}

// plan is a set of limits, as AllowLimits takes them.
type plan = []slidelimit.Limit

func limitString(l slidelimit.Limit) string {
	s := fmt.Sprintf("slidelimit.Per(%d, %s)", l.Quota, durString(l.Window))
	if l.InFlight {
		s = fmt.Sprintf("slidelimit.InFlight(%d, %s)", l.Quota, durString(l.Window))
	}
	if l.Step != 0 {
		s += fmt.Sprintf(".Stepped(%s)", durString(l.Step))
	}
	if l.Requests {
		s += ".ForRequests()"
	}
	if l.Shadow {
		s += ".Shadowed()"
	}
	if l.Name != "" {
		s += fmt.Sprintf(".Named(%q)", l.Name)
	}
	return s
}

// treeString writes a tenant's tree as Go.
func treeString(levels []slidelimit.Level) string {
	parts := make([]string, len(levels))
	for i, lv := range levels {
		parts[i] = fmt.Sprintf("{Identity: %q, Limits: %s}", lv.Identity, planString(lv.Limits))
	}
	return "[]slidelimit.Level{" + strings.Join(parts, ", ") + "}"
}

// durString writes d as a Go expression.
func durString(d time.Duration) string {
	units := []struct {
		d    time.Duration
		name string
	}{{24 * time.Hour, "24 * time.Hour"}, {time.Hour, "time.Hour"}, {time.Minute, "time.Minute"},
		{time.Second, "time.Second"}, {time.Millisecond, "time.Millisecond"}, {time.Microsecond, "time.Microsecond"}}
	if d == 0 {
		return "0"
	}
	for _, u := range units {
		if d%u.d == 0 {
			if d == u.d {
				return u.name
			}
			return fmt.Sprintf("%d * %s", d/u.d, u.name)
		}
	}
	return fmt.Sprintf("time.Duration(%d)", int64(d))
}

// isUnavailable reports whether err says Redis could not decide.
func isUnavailable(err error) bool { return errors.Is(err, slidelimit.ErrUnavailable) }

// callCtx returns the context of a call: with its request id if it has one.
func callCtx(ctx context.Context, req string, withID bool) context.Context {
	if withID {
		return slidelimit.ContextWithRequestID(ctx, req)
	}
	return ctx
}
