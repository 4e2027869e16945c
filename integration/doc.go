// Package integration proves slidelimit's fleet-level claims against real
// Redis, standalone and Redis Cluster. It holds no library code: everything
// is in its tests and benchmarks.
//
//   - TestExactnessAcrossProcesses: four OS processes of 32 goroutines each
//     share one limit, and exactly the quota is admitted (Allow, AllowN with
//     fixed and mixed costs, several limits at once).
//   - TestSameMillisecondBurst: 1,000 requests in the same instant are 1,000
//     members.
//   - TestNoScriptRecovery: SCRIPT FLUSH in the middle of traffic costs no
//     call and no exactness.
//   - TestRetriedCallCountsOnce: a call whose reply is lost and that go-redis
//     retries counts once.
//   - TestRedisDown and TestRedisHung: a dead or stalled Redis yields the
//     failure policy's decision, and decisions come back with Redis.
//   - TestMemoryPerRequest: bytes of Redis memory per in-window request.
//   - TestAdaptersShareOneLimit: Gin, Echo, Fiber and net/http servers share
//     one limit.
//   - TestOneAPIKeyAcrossRESTAndGRPC: one API key over the four HTTP
//     adapters and gRPC has one quota (5 of 20 admitted), hashed in Redis.
//   - TestMixedFleetBehindXFFProxy: behind an X-Forwarded-For-only proxy,
//     every adapter and gRPC resolve the same client: 5 each in total.
//   - BenchmarkAllow: decisions per second at 1 to 256 goroutines. make
//     bench (the bench module, BENCHMARKS.md) measures the same beside the
//     peer libraries and redis-benchmark.
//
// Run the tests from the repository root with make test, or for this module
// alone:
//
//	scripts/with-redis.sh bash -c 'cd integration && go test -race -count=1 ./...'
package integration
