package slidelimit

import (
	"strconv"
	"strings"
	"time"
)

// HeaderSet selects groups of rate-limit header fields.
type HeaderSet uint8

const (
	// HeaderRateLimit is the pair RateLimit-Policy and RateLimit of
	// draft-ietf-httpapi-ratelimit-headers-10, one list item per limit:
	//
	//	RateLimit-Policy: "100/1m";q=100;w=60
	//	RateLimit: "100/1m";r=42;t=17
	HeaderRateLimit HeaderSet = 1 << iota
	// HeaderXRateLimit is X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset for the deciding limit.
	HeaderXRateLimit
	// HeaderRetryAfter is Retry-After on denials.
	HeaderRetryAfter
)

// Headers maps a Result to rate-limit header fields. It is the one mapping
// every adapter uses, for HTTP headers and gRPC metadata alike. The zero
// value writes every field, with X-RateLimit-Reset in seconds from now.
//
// All times are whole seconds rounded up. The t parameter of RateLimit and
// X-RateLimit-Reset give, for a limit that denies the request, the time
// until it would admit it (RetryAfter, equal to Retry-After), and otherwise
// the time until its window is empty and its whole quota is back
// (ResetAfter). Retry-After is at least 1. A Fallback Result gets no field
// that claims quota: only Retry-After, and only on a denial. A Shadow Result
// gets no field at all: the request was admitted, and its quota fields would
// report a denial the client never saw.
type Headers struct {
	// Omit lists the groups not to write.
	Omit HeaderSet
	// ResetUnix writes X-RateLimit-Reset as a Unix time in seconds, as
	// GitHub does, rather than as seconds from now.
	ResetUnix bool
}

// Header field names written by Headers.Write, in canonical form.
const (
	// FieldRateLimitPolicy names the field that lists each limit with its
	// quota (q) and its window in seconds (w).
	FieldRateLimitPolicy = "RateLimit-Policy"
	// FieldRateLimit names the field that lists each limit with its
	// remaining units (r) and its t in seconds, as described on Headers.
	FieldRateLimit = "RateLimit"
	// FieldXRateLimitLimit names the field that holds the deciding limit's
	// quota.
	FieldXRateLimitLimit = "X-Ratelimit-Limit"
	// FieldXRateLimitRemaining names the field that holds the units the
	// deciding limit has left.
	FieldXRateLimitRemaining = "X-Ratelimit-Remaining"
	// FieldXRateLimitReset names the field that holds the deciding limit's
	// t, in seconds from now or, with Headers.ResetUnix, as a Unix time.
	FieldXRateLimitReset = "X-Ratelimit-Reset"
	// FieldRetryAfter names the field that holds, on a denial, the whole
	// seconds to wait before retrying.
	FieldRetryAfter = "Retry-After"
)

// Write calls set once for each header field r should carry, in a fixed
// order. Names are in canonical MIME form; gRPC callers lower-case them.
func (h Headers) Write(r Result, set func(name, value string)) {
	if r.Shadow {
		return
	}
	if !r.Fallback && len(r.Statuses) > 0 {
		if h.Omit&HeaderRateLimit == 0 {
			var policy, state strings.Builder
			for i, s := range r.Statuses {
				if i > 0 {
					policy.WriteString(", ")
					state.WriteString(", ")
				}
				name := strconv.Quote(s.Limit.String())
				policy.WriteString(name + ";q=" + strconv.Itoa(s.Limit.Quota) + ";w=" + strconv.FormatInt(s.Limit.windowSeconds(), 10))
				state.WriteString(name + ";r=" + strconv.Itoa(s.Remaining) + ";t=" + strconv.FormatInt(resetSeconds(s), 10))
			}
			set(FieldRateLimitPolicy, policy.String())
			set(FieldRateLimit, state.String())
		}
		if h.Omit&HeaderXRateLimit == 0 {
			d := Status{Limit: r.Limit, Remaining: r.Remaining, RetryAfter: r.RetryAfter, ResetAfter: r.ResetAfter}
			reset := resetSeconds(d)
			if h.ResetUnix {
				reset += time.Now().Unix()
			}
			set(FieldXRateLimitLimit, strconv.Itoa(r.Limit.Quota))
			set(FieldXRateLimitRemaining, strconv.Itoa(r.Remaining))
			set(FieldXRateLimitReset, strconv.FormatInt(reset, 10))
		}
	}
	if !r.Allowed && h.Omit&HeaderRetryAfter == 0 && (r.Fallback || len(r.Statuses) > 0) {
		set(FieldRetryAfter, strconv.FormatInt(RetryAfterSeconds(r), 10))
	}
}

// RetryAfterSeconds returns r.RetryAfter in whole seconds, rounded up and
// at least 1: the value of Retry-After.
func RetryAfterSeconds(r Result) int64 {
	return max(1, ceilSeconds(r.RetryAfter))
}

// resetSeconds is the t of one limit: RetryAfter while it denies,
// ResetAfter otherwise.
func resetSeconds(s Status) int64 {
	if s.RetryAfter > 0 {
		return max(1, ceilSeconds(s.RetryAfter))
	}
	return ceilSeconds(s.ResetAfter)
}

func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}
