package slidelimit

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Bounds on a Limit. They keep one key's sorted set, and so Redis memory and
// script time, bounded.
const (
	// MaxQuota is the largest Quota a Limit may have.
	MaxQuota = 1_000_000
	// MinWindow is the shortest Window a Limit may have.
	MinWindow = time.Millisecond
	// MaxWindow is the longest Window a Limit may have.
	MaxWindow = 366 * 24 * time.Hour
	// maxNameLen is the longest Name a Limit may have.
	maxNameLen = 64

	// MaxExactQuota is the largest Quota counted exactly, one log entry
	// per unit; a Limit of a larger Quota is counted in steps (see
	// Limit.Step). It keeps a request of the whole quota under about a
	// millisecond of Redis time (BENCHMARKS.md).
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
	case l.Quota < 1 || l.Quota > MaxQuota:
		return fmt.Errorf("%w: quota %d is outside 1..%d", ErrInvalidLimit, l.Quota, MaxQuota)
	case l.Window < MinWindow || l.Window > MaxWindow:
		return fmt.Errorf("%w: window %v is outside %v..%v", ErrInvalidLimit, l.Window, MinWindow, MaxWindow)
	case l.Step < 0 || l.Step > 0 && l.Step < MinStep:
		return fmt.Errorf("%w: step %v is below %v", ErrInvalidLimit, l.Step, MinStep)
	case l.Step > l.Window:
		return fmt.Errorf("%w: step %v is longer than the window %v", ErrInvalidLimit, l.Step, l.Window)
	case l.Step > 0 && l.Window > MaxSteps*l.Step.Truncate(time.Microsecond):
		return fmt.Errorf("%w: window %v spans more than %d steps of %v", ErrInvalidLimit, l.Window, MaxSteps, l.Step)
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
// window in a compact form such as "100/1m", "10/1s" or "5/1h30m".
func (l Limit) String() string {
	if l.Name != "" {
		return l.Name
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

// limitSet is a validated list of limits, as the allow script reads them.
type limitSet struct {
	limits   []Limit
	args     []any   // per limit: quota, then the window in µs, or "window:step" in µs
	steps    []int64 // the distinct steps in µs, in the order of the limits
	minQuota int     // the largest cost every limit can admit
}

// newLimitSet validates limits: each must be valid, and their names
// (String) distinct, since the RateLimit headers tell them apart by name.
// Errors wrap ErrInvalidLimit.
func newLimitSet(limits []Limit) (limitSet, error) {
	s := limitSet{limits: limits, args: make([]any, 0, 2*len(limits)), minQuota: MaxQuota}
	if len(limits) == 0 {
		return s, fmt.Errorf("%w: no limit", ErrInvalidLimit)
	}
	for i, lim := range limits {
		if err := lim.Validate(); err != nil {
			return s, err
		}
		for _, prev := range limits[:i] {
			if prev.String() == lim.String() {
				return s, fmt.Errorf("%w: two limits are both %q", ErrInvalidLimit, lim.String())
			}
		}
		s.args = append(s.args, lim.Quota, windowArg(lim))
		if step := lim.Resolution().Microseconds(); step > 0 && !slices.Contains(s.steps, step) {
			s.steps = append(s.steps, step)
		}
		s.minQuota = min(s.minQuota, lim.Quota)
	}
	return s, nil
}

// windowArg is lim's window as the allow script reads it: its µs, and for a
// stepped limit ":" and the step's µs.
func windowArg(lim Limit) any {
	w := lim.Window.Microseconds()
	step := lim.Resolution().Microseconds()
	if step == 0 {
		return w
	}
	return strconv.FormatInt(w, 10) + ":" + strconv.FormatInt(step, 10)
}
