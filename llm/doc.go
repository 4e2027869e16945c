// Package llmlimit is net/http middleware that rate-limits an
// OpenAI-compatible API, or Anthropic's Messages API, as those APIs limit
// their own clients: by requests, tokens and requests in flight, per API
// key, team and organisation, across every replica of a service on one
// Redis (package slidelimit).
//
// Call New with a slidelimit.Limiter and a CallerFunc, which says who
// makes a request: the levels of its tree (Caller, Level), the outermost
// first, each with its Limits (requests and tokens per minute, requests in
// flight, a daily or monthly budget of tokens) and optionally Shadow
// limits being rolled out. Wrap the handler that answers the API, such as
// an httputil.ReverseProxy:
//
//	handler := llmlimit.New(lim, callers)(proxy)
//
// For each request to /v1/chat/completions, /v1/completions,
// /v1/responses, /v1/embeddings or /v1/messages the middleware
//
//  1. reads the body, at most WithMaxBody bytes, and estimates the tokens
//     the request may use (Estimate: its input, and its max_tokens,
//     max_completion_tokens or max_output_tokens);
//  2. asks the limiter to admit it at every level of its caller's tree at
//     once: a denial is answered 429 with Retry-After and the API's error
//     body, whose type says what bound it ("requests" or "tokens");
//  3. passes it on with its body restored, asking a stream for its usage
//     when the client did not (and taking that chunk out again on its way
//     back);
//  4. settles it, when its answer ends, to the tokens the answer's usage
//     reports, JSON or streamed, so that what it reserved but did not use
//     is free again at once.
//
// Every answer carries the API's rate-limit header fields: OpenAI's
// x-ratelimit-limit-requests, x-ratelimit-remaining-tokens and the
// others, or Anthropic's anthropic-ratelimit-…. The official SDKs read
// them: they surface a 429's error type and code, and wait as long as its
// Retry-After says before retrying.
//
// Limits are counted the way each kind needs, with nothing to choose:
// requests exactly, tokens in steps of a thousandth of their window (a
// count per step whatever the budget), requests in flight with a lease
// the middleware renews while the request runs. Quotas are at most
// slidelimit.MaxQuota (10^12 tokens).
//
// The middleware never panics on a hostile body: a body too large is
// answered 413, one that is not JSON or has fields of the wrong types 400,
// before anything is counted, and what it reads of an answer is bounded
// too.
package llmlimit
