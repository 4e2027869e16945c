package slidelimit

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Level is one identity of a tenant's tree, such as an organisation, one
// of its teams or one of their API keys, with the limits it is held to
// (see AllowTree).
type Level struct {
	// Identity names the level within the tenant, such as "team:ml" or
	// "key:4f2a". Empty is the tenant itself, whose count its calls of
	// Allow, AllowN and AllowLimits share. It may hold any bytes (see Key).
	Identity string
	// Limits are the level's limits. Names (String) must be distinct
	// across the whole tree, since the RateLimit headers tell them apart
	// by name.
	Limits []Limit
}

// AllowTree records a request of cost n at every level of tenant's tree if
// every level's limits have room, and otherwise records nothing at any
// level: one atomic decision, so a denial at one level never takes quota
// at another. A request of an API key of a team of an organisation, say,
// is held to the key's, the team's and the organisation's limits at once:
//
//	res, err := lim.AllowTree(ctx, "org:acme", tokens,
//		slidelimit.Level{Limits: []slidelimit.Limit{slidelimit.PerMinute(100_000).Named("org")}},
//		slidelimit.Level{Identity: "team:ml", Limits: []slidelimit.Limit{slidelimit.PerMinute(20_000).Named("team")}},
//		slidelimit.Level{Identity: "key:4f2a", Limits: []slidelimit.Limit{
//			slidelimit.PerMinute(5_000).Named("key"), slidelimit.InFlight(4, time.Minute).Named("key-in-flight")}})
//
// Every level's logs share the tenant's hash tag, so the decision runs on
// one Redis Cluster slot: prefix + "{" + tenant + "}" for the tenant
// itself, and that and "/" + the level's identity for the others (both made
// safe as Key describes). Result.Statuses list every level's limits, in
// order, each with its Status.Level; Settle, Refund, Release and Renew
// act on every level. Levels' identities must be distinct, and at least
// one level given. Limits must be distinct by String across the levels, as
// within one plan, since the rate-limit headers tell them apart by name:
// give equal limits of different levels their level's name (Named), as
// above. Errors are those of AllowLimits.
func (l *Limiter) AllowTree(ctx context.Context, tenant string, n int, levels ...Level) (Result, error) {
	start := time.Now()
	stems, names, set, err := l.tree(tenant, levels)
	if err != nil {
		res := Result{}
		if len(levels) > 0 && len(levels[0].Limits) > 0 {
			res.Limit = levels[0].Limits[0]
		}
		return l.observe(ctx, tenant, n, start, res, err)
	}
	if n < 1 || n > set.minQuota {
		err := fmt.Errorf("%w: cost %d is outside 1..%d", ErrInvalidCost, n, set.minQuota)
		return l.observe(ctx, tenant, n, start, Result{Limit: set.limits[0]}, err)
	}
	return l.decide(ctx, tenant, stems, names, n, requestID(ctx), set)
}

// tree validates a tenant's tree and returns its levels' key stems, their
// names and its limits.
func (l *Limiter) tree(tenant string, levels []Level) (stems, names []string, set *limitSet, err error) {
	tag, err := hashTag(tenant)
	if err != nil {
		return nil, nil, nil, err
	}
	if len(levels) == 0 {
		return nil, nil, nil, fmt.Errorf("%w: a tree of no level", ErrInvalidLimit)
	}
	root := logKey(l.cfg.prefix, tag)
	var limits []Limit
	var of []int
	for i, lv := range levels {
		for _, prev := range levels[:i] {
			if prev.Identity == lv.Identity {
				return nil, nil, nil, fmt.Errorf("%w: two levels are both %q", ErrInvalidKey, lv.Identity)
			}
		}
		stem := root
		if lv.Identity != "" {
			sub, _ := hashTag(lv.Identity) // not empty: no error
			stem += "/" + sub
		}
		if len(lv.Limits) == 0 {
			return nil, nil, nil, fmt.Errorf("%w: level %q has no limit", ErrInvalidLimit, lv.Identity)
		}
		stems, names = append(stems, stem), append(names, lv.Identity)
		for _, lim := range lv.Limits {
			limits, of = append(limits, lim), append(of, i)
		}
	}
	s, err := compileSet(limits, of)
	if err != nil {
		return nil, nil, nil, err
	}
	// The deny cache tells trees apart by their levels too.
	s.sig += "|" + strings.Join(stems, "|")
	return stems, names, &s, nil
}
