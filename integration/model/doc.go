// Package model is slidelimit's model checker: it drives real limiters,
// several "processes" (go-redis clients) of them on one Redis and one key
// prefix, through random, seeded sequences of the operations users combine
// (Allow, AllowN, AllowLimits with plans that change mid-window and hold
// limits of requests, shadow limits and limits in flight, AllowTree,
// Peek, Settle, Refund, Release, Renew, Shift, Reset, retries with
// ContextWithRequestID, Wait and WaitN with deadlines and cancellations,
// Block) and the faults a deployment meets
// (killed connections, a stalled or restarted Redis, a partition of
// every process from a Redis that keeps its data, with the settlements
// kept across it landing when it heals, a Cluster slot migrated under
// traffic), and judges every answer against a reference
// model of the documented promises.
//
// It holds no library code: the checker is its tests. pgregory.net/rapid
// generates and shrinks the sequences; the model (spec_test.go), the
// documented narrowings it allows (narrowing_test.go) and the invariants
// (narrowing_test.go's bounds, observe_test.go, concurrent_test.go) are the project's own.
//
// Run it from the repository root with make test (a fixed budget) or
// make check-model SEED=… DURATION=… (see integration/README.md).
package model
