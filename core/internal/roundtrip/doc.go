// Package roundtrip takes the limiter's commands to Redis and back: the
// dispatcher that batches the decisions of every Limiter on one go-redis
// client (one lane per Redis node, at most maxInFlight round trips out and
// maxBatch calls a round trip), the timeout that measures Redis's silence
// rather than this process's queueing (with a busy meter that tells a
// silent Redis from a busy process or host), what a reply says about a
// node's health, retries of the replies worth sending again, and each
// Limiter's circuit breaker per node.
//
// Its whole surface is Caller: New makes one per Limiter, Decide sends a
// decision of the allow script (package script builds it), and Run bounds
// any other command by the Limiter's timeout. It knows nothing of limits,
// identities or failure policies: an error it returns is for the Limiter
// to decide on.
package roundtrip
