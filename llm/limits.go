package llmlimit

import (
	"errors"
	"fmt"
	"time"

	slidelimit "github.com/slidelimit/slidelimit/core"
)

// Limits are the limits of one level of a caller's tree. A zero field sets
// no such limit. The middleware picks how each is counted: requests
// exactly, tokens in steps of a thousandth of their window (a request
// reserves thousands of tokens at once; the count never exceeds the quota
// in any window, and may deny for up to one step longer than an exact one
// would), requests in flight with a lease renewed while they run.
type Limits struct {
	// Requests is the most requests in any window (WithWindow: a minute
	// by default), as OpenAI's RPM.
	Requests int
	// Tokens is the most tokens in any window, as OpenAI's TPM.
	Tokens int
	// InFlight is the most requests at once.
	InFlight int
	// TokensPerDay is a budget of tokens in any 24 hours.
	TokensPerDay int
	// TokensPerMonth is a budget of tokens in any 30 days.
	TokensPerMonth int
}

// Level is one level of a caller's tree, such as its organisation, its
// team or its API key.
type Level struct {
	// Name names the level's kind, such as "org", "team" or "key":
	// letters, digits, '_', '-' and '.', distinct within a Caller. It
	// names the level's limits in denials ("key-tokens") and, with ID,
	// its count in Redis.
	Name string
	// ID is the level's identity, such as the organisation's name or the
	// API key; any bytes, not empty.
	ID string
	// Limits are the level's enforced limits.
	Limits Limits
	// Shadow are limits counted and reported beside Limits but never
	// enforced: a limit being rolled out. Its denials are seen by the
	// limiter's observers (slidelimit.Observation.ShadowDenied), never by
	// the client, and no header field reports it.
	Shadow Limits
}

// Caller is who makes a request: the levels of its tree, the outermost
// first (organisation, team, key). A request is admitted only if every
// level's limits have room, and is then counted at every level, in one
// atomic decision (slidelimit.Limiter.AllowTree): a denial at one level
// takes nothing at another. Levels of the same first level share one
// Redis Cluster slot.
type Caller struct {
	// Levels are the caller's levels, the outermost first; a level of no
	// limit counts nothing, and a caller of no limit at all is passed on
	// unlimited.
	Levels []Level
}

// ErrUnknownCaller means the caller function knows no caller for a
// request, such as one without an API key or with one it does not know.
// The middleware answers it 401 in the API's error format.
var ErrUnknownCaller = errors.New("llmlimit: unknown caller")

// ErrInvalidCaller means a Caller has no level, a level with no name, no
// identity or an invalid name, or two levels of one name. The middleware
// answers it 500.
var ErrInvalidCaller = errors.New("llmlimit: invalid caller")

// tree returns the tenant and the levels of c for AllowTree, with limits
// of window and leases of lease, and the smallest quota of its enforced
// limits of tokens (0 if it has
// none). A level with no limit is left out;
// with none at all, levels is empty.
func (c Caller) tree(window, lease time.Duration) (tenant string, levels []slidelimit.Level, minTokens int, err error) {
	if len(c.Levels) == 0 {
		return "", nil, 0, fmt.Errorf("%w: no level", ErrInvalidCaller)
	}
	for i, lv := range c.Levels {
		if lv.Name == "" || lv.ID == "" {
			return "", nil, 0, fmt.Errorf("%w: level %d has no name or no identity", ErrInvalidCaller, i)
		}
		for _, prev := range c.Levels[:i] {
			if prev.Name == lv.Name {
				return "", nil, 0, fmt.Errorf("%w: two levels are both %q", ErrInvalidCaller, lv.Name)
			}
		}
		id := lv.Name + ":" + lv.ID
		if i == 0 {
			tenant, id = id, ""
		}
		limits := lv.Limits.limits(lv.Name, window, lease, false)
		limits = append(limits, lv.Shadow.limits(lv.Name+"-shadow", window, lease, true)...)
		if len(limits) == 0 {
			continue // a level with no limit counts nothing
		}
		for _, l := range limits {
			if !l.Shadow && !l.Requests && !l.InFlight && (minTokens == 0 || l.Quota < minTokens) {
				minTokens = l.Quota
			}
		}
		levels = append(levels, slidelimit.Level{Identity: id, Limits: limits})
	}
	if len(levels) == 0 {
		return "", nil, 0, nil // nothing to count: unlimited
	}
	return tenant, levels, minTokens, nil
}

// limits returns l as slidelimit limits named after name.
func (l Limits) limits(name string, window, lease time.Duration, shadow bool) []slidelimit.Limit {
	var out []slidelimit.Limit
	add := func(lim slidelimit.Limit, what string) {
		lim = lim.Named(name + "-" + what)
		if shadow {
			lim = lim.Shadowed()
		}
		out = append(out, lim)
	}
	if l.Requests > 0 {
		add(slidelimit.Per(l.Requests, window).ForRequests(), "requests")
	}
	if l.Tokens > 0 {
		add(tokens(l.Tokens, window), "tokens")
	}
	if l.InFlight > 0 {
		add(slidelimit.InFlight(l.InFlight, lease), "in-flight")
	}
	if l.TokensPerDay > 0 {
		add(tokens(l.TokensPerDay, 24*time.Hour), "tokens-per-day")
	}
	if l.TokensPerMonth > 0 {
		add(tokens(l.TokensPerMonth, 30*24*time.Hour), "tokens-per-month")
	}
	return out
}

// tokens is a limit of n tokens per window (n at most
// slidelimit.MaxQuota, 10^12), counted in steps of a thousandth of the
// window: a count per step whatever the quota, so that a day's or a
// month's budget of any size takes about 12 KB of Redis a level.
func tokens(n int, window time.Duration) slidelimit.Limit {
	return slidelimit.Per(min(n, slidelimit.MaxQuota), window).Stepped(max(window/1000, slidelimit.MinStep))
}
