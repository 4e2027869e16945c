// Package httplimit limits net/http handlers with a slidelimit.Limiter, and
// holds the HTTP pieces every HTTP adapter shares: the problem+json body of a
// denial and the status of a failure.
package httplimit
