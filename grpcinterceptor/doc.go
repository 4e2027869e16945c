// Package grpclimit limits gRPC calls with slidelimit: an exact sliding
// window shared through Redis by every replica of a service, answered the
// way gRPC clients understand.
//
// Create a slidelimit.Limiter once and install both server interceptors:
//
//	lim, err := slidelimit.New(rdb, slidelimit.PerMinute(100))
//	if err != nil {
//		return err
//	}
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(lim, grpclimit.WithSkipMethods("grpc.health.v1.Health"))),
//		grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(lim, grpclimit.WithSkipMethods("grpc.health.v1.Health"))),
//	)
//
// Each unary call, and each stream when it opens, counts once (or WithCost
// units) against the limit of its caller, by default the client IP address
// (WithKey, WithTrustedProxies), or against every level of its tenant's
// tree, such as its organisation's, team's and API key's limits at once
// (WithTree). Methods can have their own limiters
// (WithMethodLimiters, WithLimiterFunc), streams can also be limited per
// received message (WithMessageLimit), and calls can give their units back
// by status code (WithRefundFailed, WithRefundSuccessful) or be settled to
// their actual cost from their response message or trailer (WithSettle).
// A call admitted under an in-flight limit (slidelimit.InFlight) holds its
// place until its handler returns: a stream for its whole life.
//
// # Keys
//
// Key helpers and identities are those of the HTTP adapters of this
// project: KeyByIP, KeyByMetadata (an API key, hashed so that it never
// stands in clear in Redis, and the identity KeyByHeader gives the same
// value over HTTP), KeyByUser, KeyByMethod, JoinKeys and FirstKey, so a
// client has one quota across REST and gRPC. Client IPs behind trusted
// proxies are resolved by slidelimit.ClientIP, as over HTTP.
//
// # Denials
//
// A denied call ends with codes.ResourceExhausted and two status details: a
// google.rpc.RetryInfo saying how long until the call would be admitted,
// and a google.rpc.QuotaFailure naming the policy that denied it. The
// trailers carry grpc-retry-pushback-ms and the rate-limit fields. Nothing
// goes in the response headers, so the response is trailers-only and a
// client whose service config has a retry policy for RESOURCE_EXHAUSTED
// retries it after the pushback; a response with headers would count as
// committed and never be retried. UnaryClientInterceptor retries on
// RetryInfo for clients without such a policy.
//
// # Metadata
//
// Allowed calls carry the rate-limit fields in their response headers, as
// lower-case metadata keys: ratelimit-policy, ratelimit, x-ratelimit-limit,
// x-ratelimit-remaining and x-ratelimit-reset, with values from
// slidelimit.Headers, the mapping every slidelimit adapter shares.
//
// # Failures
//
// When Redis is down or slow, the limiter's slidelimit.FailurePolicy
// decides: fail-open (the default) lets calls through, fail-closed refuses
// them with codes.Unavailable, never codes.ResourceExhausted. Errors go to
// the ErrorHook (WithErrorHook).
//
// # Outgoing calls
//
// UnaryClientWaitInterceptor and StreamClientWaitInterceptor limit the
// calls a client makes, by default per target (ClientKeyByTarget): they
// wait within the call's context until the limiter admits the call, and
// turn a server's ResourceExhausted with RetryInfo into a block of the key
// that every process sharing the limiter obeys (slidelimit.Limiter.Block).
// UnaryClientInterceptor does the same with WithBlock.
package grpclimit
