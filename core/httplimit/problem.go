package httplimit

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	slidelimit "github.com/slidelimit/slidelimit/core"
)

// ContentTypeProblem is the media type of a Problem body (RFC 9457).
const ContentTypeProblem = "application/problem+json"

// ProblemTypeQuotaExceeded is the problem type of a denial, registered by
// draft-ietf-httpapi-ratelimit-headers.
const ProblemTypeQuotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"

// Problem is the body every HTTP adapter sends with a 429: a small
// application/problem+json document (RFC 9457) naming the violated policy.
type Problem struct {
	// Type is ProblemTypeQuotaExceeded.
	Type string `json:"type"`
	// Title is "Too Many Requests".
	Title string `json:"title"`
	// Status is 429.
	Status int `json:"status"`
	// Detail says which policy denied the request and when to retry.
	Detail string `json:"detail"`
	// Policy is the name of the violated limit, as in RateLimit-Policy.
	Policy string `json:"policy"`
	// RetryAfter is the Retry-After value in seconds.
	RetryAfter int64 `json:"retry_after"`
}

// NewProblem returns the Problem describing the denial r.
func NewProblem(r slidelimit.Result) Problem {
	retry := slidelimit.RetryAfterSeconds(r)
	return Problem{
		Type:       ProblemTypeQuotaExceeded,
		Title:      http.StatusText(http.StatusTooManyRequests),
		Status:     http.StatusTooManyRequests,
		Detail:     "rate limit " + r.Limit.String() + " exceeded; retry in " + strconv.FormatInt(retry, 10) + "s",
		Policy:     r.Limit.String(),
		RetryAfter: retry,
	}
}

// JSON returns p encoded as JSON.
func (p Problem) JSON() []byte {
	b, _ := json.Marshal(p) // a struct of strings and integers always encodes
	return b
}

// FailureStatus returns the status code for a request that could not be
// decided because of err: 503 Service Unavailable when Redis failed (the
// fail-closed case, sent with Retry-After), and 500 Internal Server Error
// for anything else, such as a key function that produced an empty identity.
func FailureStatus(err error) int {
	if errors.Is(err, slidelimit.ErrUnavailable) {
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}
