package slidelimit

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/slidelimit/slidelimit/core/internal/script"
)

// Bounds on a Limit. They keep one key's memory, and a decision's Redis
// time, bounded.
const (
	// MaxQuota is the largest Quota a Limit may have, 10^12 (a stepped log
	// counts each step in 48 bits): a day of tokens or of micro-dollars of
	// a busy organisation. On a 32-bit platform an int bounds it first.
	MaxQuota = 1_000_000_000_000
	// MinWindow is the shortest Window a Limit may have.
	MinWindow = time.Millisecond
	// MaxWindow is the longest Window a Limit may have.
	MaxWindow = 366 * 24 * time.Hour
	// maxNameLen is the longest Name a Limit may have.
	maxNameLen = 64

	// MaxExactQuota is the largest Quota counted exactly by default, one
	// log member per request (two when its cost is not 1); a Limit of a
	// larger Quota is counted in steps (see Limit.Step), so that an
	// identity's log stays within a few hundred KB.
	MaxExactQuota = 1_000
	// MinStep is the shortest Step a Limit may have.
	MinStep = time.Millisecond
	// MaxSteps is the most steps a Limit's Window may span, which bounds
	// a stepped log's memory and the Redis time of a decision.
	MaxSteps = 1_440
)

// Limit admits at most Quota units in any span of time as long as Window,
// measured as a sliding window: at every instant, the units admitted in the
// Window before it are counted, so there is no boundary at which a fresh
// window opens and a burst of twice the quota slips through.
//
// A Limit is a small value; copy it freely. The zero Limit is invalid.
type Limit struct {
	// Quota is the most units admitted in any Window; 1 to MaxQuota.
	Quota int
	// Window is the span the quota covers; MinWindow to MaxWindow,
	// counted in whole microseconds.
	Window time.Duration
	// Name is an optional policy name: letters, digits, '_', '-' and '.',
	// at most 64 bytes. It names the limit in the RateLimit headers and in
	// Results. It takes no part in counting: every limit counts the same
	// log of the identity (see Limiter), so a limit keeps its count when its
	// quota, window or name changes. Empty means String().
	Name string
	// Step is the resolution at which the limit counts: the log keeps one
	// count per step rather than one entry per unit, so that a day-long
	// window costs at most MaxSteps counts of memory whatever its quota.
	// A stepped limit never admits more than Quota in any Window; it may
	// deny for up to one Step longer than an exact log would, and its
	// RetryAfter and ResetAfter are exact to the step.
	//
	// Zero means the default: exact for a Quota up to MaxExactQuota,
	// otherwise Window/1440 (one minute for a day), at least MinStep
	// (see Limit.Resolution). A Step must be at least MinStep, at most the
	// Window and such that the Window spans at most MaxSteps steps; it is
	// counted in whole microseconds.
	Step time.Duration
	// Requests makes the limit count requests, one each, rather than their
	// cost: "60 requests a minute" beside "100,000 tokens a minute" in
	// one decision of a request of 1,200 tokens. Such a limit counts a log
	// of its own, beside the identity's log of units, so a plan change
	// between the two kinds starts a fresh count. See Limit.ForRequests.
	Requests bool
	// InFlight makes the limit one on requests in flight rather than on
	// units in a window: at most Quota requests of the identity hold a
	// lease at once, each from its admission until it is released
	// (Limiter.Release, Settle or Refund) or its lease has passed since it
	// was taken or renewed (Limiter.Renew), so that a holder that dies frees
	// its place by itself. A request takes one place whatever its cost. Its
	// lease is the longest Window of its enforced in-flight limits (of its
	// shadow ones if it has none), so that a shadow limit never holds a
	// place an enforced one would free. A denial's RetryAfter is when a
	// place is expected to free, from the holds the identity's releases
	// showed (the earliest lease's end until one did). See InFlight; an
	// in-flight limit has no Step.
	InFlight bool
	// Shadow makes the limit a shadow: it is counted and reported like the
	// others (Result.Statuses; Observation.ShadowDenied lists it when it
	// would have denied) but it never denies, and header writers send no
	// field for it. It is how one new limit is rolled out beside enforced
	// ones, with one limiter, one call and one count. See Limit.Shadowed.
	Shadow bool
}

// InFlight returns a Limit of n requests in flight at once, each holding
// its place for at most lease unless renewed. See Limit.InFlight.
func InFlight(n int, lease time.Duration) Limit {
	return Limit{Quota: n, Window: lease, InFlight: true}
}

// leaseOf returns the lease a request under limits takes in flight: the
// longest Window of its enforced in-flight limits, or of its shadow ones
// if it has none (0: no in-flight limit).
func leaseOf(limits []Limit) time.Duration {
	var lease, shadow time.Duration
	for _, l := range limits {
		switch {
		case !l.InFlight:
		case l.Shadow:
			shadow = max(shadow, l.Window)
		default:
			lease = max(lease, l.Window)
		}
	}
	if lease == 0 {
		return shadow
	}
	return lease
}

// ForRequests returns a copy of l that counts requests rather than their
// cost. See Limit.Requests.
func (l Limit) ForRequests() Limit {
	l.Requests = true
	return l
}

// Shadowed returns a copy of l as a shadow limit. See Limit.Shadow.
func (l Limit) Shadowed() Limit {
	l.Shadow = true
	return l
}

// Per returns a Limit of quota units in any span of window.
func Per(quota int, window time.Duration) Limit {
	return Limit{Quota: quota, Window: window}
}

// PerSecond returns a Limit of quota units in any second.
func PerSecond(quota int) Limit { return Per(quota, time.Second) }

// PerMinute returns a Limit of quota units in any minute.
func PerMinute(quota int) Limit { return Per(quota, time.Minute) }

// PerHour returns a Limit of quota units in any hour.
func PerHour(quota int) Limit { return Per(quota, time.Hour) }

// PerDay returns a Limit of quota units in any 24 hours.
func PerDay(quota int) Limit { return Per(quota, 24*time.Hour) }

// Stepped returns a copy of l counted at resolution step. See Limit.Step.
func (l Limit) Stepped(step time.Duration) Limit {
	l.Step = step
	return l
}

// Resolution returns the step at which l is counted, or 0 if it is counted
// exactly: Step if set, else 0 for a Quota up to MaxExactQuota, else
// Window/1440 rounded down to whole microseconds and at least MinStep.
func (l Limit) Resolution() time.Duration {
	switch {
	case l.InFlight:
		return 0
	case l.Step > 0:
		return l.Step.Truncate(time.Microsecond)
	case l.Quota <= MaxExactQuota:
		return 0
	}
	return max((l.Window / MaxSteps).Truncate(time.Microsecond), MinStep)
}

// Named returns a copy of l with the policy name name. See Limit.Name.
func (l Limit) Named(name string) Limit {
	l.Name = name
	return l
}

// Validate reports whether l can be enforced. The error wraps ErrInvalidLimit.
func (l Limit) Validate() error {
	switch {
	case l.Quota < 1 || int64(l.Quota) > MaxQuota:
		return fmt.Errorf("%w: quota %d is outside 1..%d", ErrInvalidLimit, l.Quota, MaxQuota)
	case l.Window < MinWindow || l.Window > MaxWindow:
		return fmt.Errorf("%w: window %v is outside %v..%v", ErrInvalidLimit, l.Window, MinWindow, MaxWindow)
	case l.Step < 0 || l.Step > 0 && l.Step < MinStep:
		return fmt.Errorf("%w: step %v is below %v", ErrInvalidLimit, l.Step, MinStep)
	case l.Step > l.Window:
		return fmt.Errorf("%w: step %v is longer than the window %v", ErrInvalidLimit, l.Step, l.Window)
	case l.Step > 0 && l.Window > MaxSteps*l.Step.Truncate(time.Microsecond):
		return fmt.Errorf("%w: window %v spans more than %d steps of %v", ErrInvalidLimit, l.Window, MaxSteps, l.Step)
	case l.InFlight && l.Step != 0:
		return fmt.Errorf("%w: an in-flight limit has no step", ErrInvalidLimit)
	case l.InFlight && l.Requests:
		return fmt.Errorf("%w: an in-flight limit counts requests already", ErrInvalidLimit)
	case len(l.Name) > maxNameLen:
		return fmt.Errorf("%w: name is %d bytes, more than %d", ErrInvalidLimit, len(l.Name), maxNameLen)
	}
	for i := 0; i < len(l.Name); i++ {
		if !nameByte(l.Name[i]) {
			return fmt.Errorf("%w: name %q may hold only letters, digits, '_', '-' and '.'", ErrInvalidLimit, l.Name)
		}
	}
	return nil
}

func nameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.'
}

// String returns the limit's name if it has one, and otherwise its quota and
// window in a compact form such as "100/1m", "10/1s" or "5/1h30m", or for
// an in-flight limit its quota, such as "5-in-flight".
func (l Limit) String() string {
	switch {
	case l.Name != "":
		return l.Name
	case l.InFlight:
		return strconv.Itoa(l.Quota) + "-in-flight"
	}
	return strconv.Itoa(l.Quota) + "/" + shortDuration(l.Window)
}

// shortDuration formats d like time.Duration.String without the zero units
// it trails: "1m" rather than "1m0s", "2h" rather than "2h0m0s".
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// windowSeconds is the window in whole seconds, rounded up, for headers.
func (l Limit) windowSeconds() int64 {
	return ceilSeconds(l.Window)
}

// limitSet is a validated list of limits, compiled for the allow script.
type limitSet struct {
	limits   []Limit
	plan     *script.Plan
	minQuota int           // the largest cost a request may have: every enforced limit of units admits it
	span     time.Duration // how long a request counts in any of its limits: the longest Window, with its Step if stepped
	sig      string        // the limits, each name, quota, window and step: the same for equal sets
	levels   []int         // levels[i]: the level limit i counts, for a tenant's tree; nil: all 0
	suffixes []string      // suffixes[i]: what follows its level's log key in the key of part i of plan (partSuffix), made once
}

// newLimitSet validates limits: each must be valid, and their names
// (String) distinct, since the RateLimit headers tell them apart by name.
// Errors wrap ErrInvalidLimit.
func newLimitSet(limits []Limit) (limitSet, error) {
	return compileSet(limits, nil)
}

// compileSet is newLimitSet for the limits of a tenant's tree: levels[i]
// is the index of the identity limit i counts (nil: all 0).
func compileSet(limits []Limit, levels []int) (limitSet, error) {
	s := limitSet{limits: limits, minQuota: math.MaxInt, levels: levels}
	if len(limits) == 0 {
		return s, fmt.Errorf("%w: no limit", ErrInvalidLimit)
	}
	compiled := make([]script.Limit, len(limits))
	for i, lim := range limits {
		if err := lim.Validate(); err != nil {
			return s, err
		}
		for _, prev := range limits[:i] {
			if prev.String() == lim.String() {
				if levels != nil {
					return s, fmt.Errorf("%w: two limits of the tree are both %q: name them by level (Limit.Named), as the rate-limit headers tell limits apart by name", ErrInvalidLimit, lim.String())
				}
				return s, fmt.Errorf("%w: two limits are both %q", ErrInvalidLimit, lim.String())
			}
		}
		level := 0
		if levels != nil {
			level = levels[i]
		}
		compiled[i] = script.Limit{Quota: lim.Quota, Window: lim.Window.Microseconds(), Step: lim.Resolution().Microseconds(),
			Shadow: lim.Shadow, InFlight: lim.InFlight, Requests: lim.Requests, Level: level}
		if !lim.InFlight && !lim.Shadow && !lim.Requests {
			s.minQuota = min(s.minQuota, lim.Quota)
		}
		s.span = max(s.span, lim.Window+lim.Resolution())
	}
	s.plan = script.NewPlan(compiled)
	for _, p := range s.plan.Parts() {
		s.suffixes = append(s.suffixes, partSuffix(p))
	}
	var sig []byte
	for _, c := range compiled {
		sig = strconv.AppendInt(sig, int64(c.Level), 10)
		sig = append(sig, '@')
		sig = strconv.AppendBool(sig, c.Shadow)
		sig = append(sig, '@')
		sig = strconv.AppendBool(sig, c.InFlight)
		sig = append(sig, '@')
		sig = strconv.AppendBool(sig, c.Requests)
		sig = append(sig, '@')
		sig = strconv.AppendInt(sig, int64(c.Quota), 10)
		sig = append(sig, '/')
		sig = strconv.AppendInt(sig, c.Window, 10)
		sig = append(sig, '/')
		sig = strconv.AppendInt(sig, c.Step, 10)
		sig = append(sig, ' ')
	}
	for _, lim := range limits {
		sig = append(sig, lim.String()...)
		sig = append(sig, ' ')
	}
	s.sig = string(sig)
	return s, nil
}
