// Package llmlimit is net/http middleware that rate-limits an
// OpenAI-compatible or Anthropic API by requests, tokens and requests in
// flight, per API key, team and organisation, across every replica on one
// Redis (package slidelimit).
package llmlimit
