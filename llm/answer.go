package llmlimit

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	slidelimit "github.com/slidelimit/slidelimit/core"
)

// The header fields the middleware sets, as OpenAI and Anthropic name
// them.
const (
	FieldLimitRequests     = "X-Ratelimit-Limit-Requests"
	FieldLimitTokens       = "X-Ratelimit-Limit-Tokens"
	FieldRemainingRequests = "X-Ratelimit-Remaining-Requests"
	FieldRemainingTokens   = "X-Ratelimit-Remaining-Tokens"
	FieldResetRequests     = "X-Ratelimit-Reset-Requests"
	FieldResetTokens       = "X-Ratelimit-Reset-Tokens"

	FieldAnthropicRequestsLimit     = "Anthropic-Ratelimit-Requests-Limit"
	FieldAnthropicRequestsRemaining = "Anthropic-Ratelimit-Requests-Remaining"
	FieldAnthropicRequestsReset     = "Anthropic-Ratelimit-Requests-Reset"
	FieldAnthropicTokensLimit       = "Anthropic-Ratelimit-Tokens-Limit"
	FieldAnthropicTokensRemaining   = "Anthropic-Ratelimit-Tokens-Remaining"
	FieldAnthropicTokensReset       = "Anthropic-Ratelimit-Tokens-Reset"
)

// binding returns, of res's enforced limits of one kind (requests or
// tokens), the one that binds: on a denial the one that denies longest,
// otherwise the one with the fewest units left, the one whose window
// empties last among equals. ok is false when res has none of the kind.
func binding(res slidelimit.Result, requests bool) (st slidelimit.Status, ok bool) {
	for _, s := range res.Statuses {
		if s.Limit.Shadow || s.Limit.InFlight || s.Limit.Requests != requests {
			continue
		}
		switch {
		case !ok,
			s.RetryAfter > st.RetryAfter,
			s.RetryAfter == st.RetryAfter && s.Remaining < st.Remaining,
			s.RetryAfter == st.RetryAfter && s.Remaining == st.Remaining && s.ResetAfter > st.ResetAfter:
			st, ok = s, true
		}
	}
	return st, ok
}

// reset is how long until a limit's state changes for the client: until
// it admits the request it denies, else until its window is empty.
func reset(s slidelimit.Status) time.Duration {
	if s.RetryAfter > 0 {
		return s.RetryAfter
	}
	return s.ResetAfter
}

// openAIDuration formats d as OpenAI's reset fields do: "6m0s", "1s",
// "20ms", to the millisecond.
func openAIDuration(d time.Duration) string {
	return d.Round(time.Millisecond).String()
}

// setFields writes res's rate-limit header fields for api on h, replacing
// any there: nothing for a decision Redis did not make (a Fallback but a
// Local one) or one the limiter made in shadow mode, whose fields would
// report limits the client is not held to.
func setFields(h http.Header, api API, res slidelimit.Result, now time.Time) {
	if res.Shadow || res.Fallback && !res.Local {
		return
	}
	for _, requests := range []bool{true, false} {
		s, ok := binding(res, requests)
		if !ok {
			continue
		}
		limit, remaining := strconv.Itoa(s.Limit.Quota), strconv.Itoa(max(s.Remaining, 0))
		switch {
		case api == Anthropic && requests:
			h.Set(FieldAnthropicRequestsLimit, limit)
			h.Set(FieldAnthropicRequestsRemaining, remaining)
			h.Set(FieldAnthropicRequestsReset, rfc3339(now, reset(s)))
		case api == Anthropic:
			h.Set(FieldAnthropicTokensLimit, limit)
			h.Set(FieldAnthropicTokensRemaining, remaining)
			h.Set(FieldAnthropicTokensReset, rfc3339(now, reset(s)))
		case requests:
			h.Set(FieldLimitRequests, limit)
			h.Set(FieldRemainingRequests, remaining)
			h.Set(FieldResetRequests, openAIDuration(reset(s)))
		default:
			h.Set(FieldLimitTokens, limit)
			h.Set(FieldRemainingTokens, remaining)
			h.Set(FieldResetTokens, openAIDuration(reset(s)))
		}
	}
}

// rfc3339 is the instant d after now, rounded up to the millisecond, in
// RFC 3339 as Anthropic's reset fields give it.
func rfc3339(now time.Time, d time.Duration) string {
	t := now.Add(d)
	if t.Truncate(time.Millisecond) != t {
		t = t.Truncate(time.Millisecond).Add(time.Millisecond)
	}
	return t.UTC().Format("2006-01-02T15:04:05.999Z07:00")
}

// retryAfter is Retry-After's value for a wait of d: whole seconds,
// rounded up, at least 1.
func retryAfter(d time.Duration) string {
	return strconv.FormatInt(max(int64((d+time.Second-1)/time.Second), 1), 10)
}

// kind returns what a denial was bound by, as OpenAI's error type names
// it: "requests" for a limit of requests or of requests in flight,
// "tokens" for a limit of tokens.
func kind(res slidelimit.Result) string {
	if res.Limit.Requests || res.Limit.InFlight {
		return "requests"
	}
	return "tokens"
}

// denialMessage says which limit denied a request of cost tokens, and when
// to try again.
func denialMessage(res slidelimit.Result, cost int) string {
	level := ""
	for _, s := range res.Statuses {
		if s.Limit.String() == res.Limit.String() && s.Level != "" {
			level = " on " + s.Level
		}
	}
	what := "tokens"
	requested := cost
	switch {
	case res.Limit.InFlight:
		what, requested = "requests in flight", 1
	case res.Limit.Requests:
		what, requested = "requests", 1
	}
	return fmt.Sprintf("Rate limit reached for %s (%s)%s: Limit %d, Remaining %d, Requested %d. Please try again in %s.",
		what, res.Limit, level, res.Limit.Quota, max(res.Remaining, 0), requested, openAIDuration(res.RetryAfter))
}

// inFlightRetry is the latest a request denied by a limit of requests in
// flight is told to retry. The denial's RetryAfter is when a place is
// expected to free, from the holds the key's releases showed (slidelimit's
// Limit.InFlight); before any release it is the oldest lease's end, which
// only bounds when a place frees.
const inFlightRetry = 10 * time.Second

// writeDenial answers a denied request of cost tokens 429 as api does,
// with Retry-After.
func writeDenial(w http.ResponseWriter, api API, res slidelimit.Result, cost int) {
	if res.Limit.InFlight {
		res.RetryAfter = min(res.RetryAfter, inFlightRetry)
	}
	w.Header().Set("Retry-After", retryAfter(res.RetryAfter))
	// The official SDKs prefer it to Retry-After, which rounds up to whole
	// seconds a wait that a token window's step makes as short as a
	// millisecond.
	w.Header().Set("Retry-After-Ms", strconv.FormatInt(int64(max((res.RetryAfter+time.Millisecond-1)/time.Millisecond, 1)), 10))
	msg := denialMessage(res, cost)
	if api == Anthropic {
		writeJSON(w, http.StatusTooManyRequests, anthropicError{Type: "error", Error: anthropicDetail{Type: "rate_limit_error", Message: msg}})
		return
	}
	code := "rate_limit_exceeded"
	writeJSON(w, http.StatusTooManyRequests, openAIError{Error: openAIDetail{Message: msg, Type: kind(res), Code: &code}})
}

// writeError answers a request the middleware could not pass on with
// status, as api does: 400 for a body it cannot read, 413 for one too
// large, 401 for an unknown caller, 500 and 503 for its own failures.
func writeError(w http.ResponseWriter, api API, status int, msg string) {
	if api == Anthropic {
		typ := "api_error"
		switch status {
		case http.StatusBadRequest:
			typ = "invalid_request_error"
		case http.StatusRequestEntityTooLarge:
			typ = "request_too_large"
		case http.StatusUnauthorized:
			typ = "authentication_error"
		}
		writeJSON(w, status, anthropicError{Type: "error", Error: anthropicDetail{Type: typ, Message: msg}})
		return
	}
	typ, code := "server_error", (*string)(nil)
	switch status {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		typ = "invalid_request_error"
	case http.StatusUnauthorized:
		typ, code = "invalid_request_error", new(string)
		*code = "invalid_api_key"
	}
	writeJSON(w, status, openAIError{Error: openAIDetail{Message: msg, Type: typ, Code: code}})
}

// openAIError is OpenAI's error body.
type openAIError struct {
	Error openAIDetail `json:"error"`
}

type openAIDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// anthropicError is Anthropic's error body.
type anthropicError struct {
	Type  string          `json:"type"`
	Error anthropicDetail `json:"error"`
}

type anthropicDetail struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil { // not for these types
		b = []byte(`{}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
