// Package redistest gives tests a real Redis: the one the test harness
// started, or a private redis-server started for one test and stopped when
// it ends. It never fakes Redis.
//
// Client and ClusterClient give a test a client of a standalone Redis and
// of a Redis Cluster; StartServer gives it a private server it can Stop
// and Restart, and StartSentinel a Sentinel watching one. Prefix gives
// each test a key prefix of its own, so tests can run in parallel against
// one server. Main, called from TestMain, gives a package's Example
// functions a Redis in REDIS_ADDR:
//
//	func TestExample(t *testing.T) {
//		rdb := redistest.Client(t)
//		lim, err := slidelimit.New(rdb, slidelimit.PerMinute(10),
//			slidelimit.WithPrefix(redistest.Prefix(t)))
//		...
//	}
//
// The harness (make test at the repository root) exports the addresses in
// SLIDELIMIT_REDIS_ADDR and SLIDELIMIT_REDIS_CLUSTER_ADDRS and sets
// SLIDELIMIT_REQUIRE_REDIS=1, under which a test that cannot reach Redis
// fails instead of skipping.
package redistest
