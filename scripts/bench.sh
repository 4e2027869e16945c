#!/usr/bin/env bash
# bench.sh: slidelimit beside its peers and beside Redis's own ceiling.
#
# Runs the bench module (bench/main.go; its doc comment lists the contenders
# and the method) against one throwaway standalone Redis: decisions/s, p50
# and p99 latency and Redis CPU per decision at 1, 16, 64 and 256 callers on
# the allowed (exact), stepped and denied paths for slidelimit, go-redis/redis_rate v10,
# ulule/limiter v3 and the classic sliding-log script; redis-benchmark
# running the allow script by EVALSHA unpipelined and with -P 16; every ratio;
# MEMORY USAGE per identity and per request; the zset-max-listpack-entries
# trade-off. Then the allocations per decision (go test -benchmem) of core
# and of each HTTP adapter, and how long a burst's script calls keep Redis
# busy (SLOWLOG). BENCHMARKS.md holds a full run.
#
# make bench runs it under scripts/with-redis.sh; run alone, it starts its
# own Redis the same way. BENCH_CELL (default 1.5s) is how long each cell
# runs, BENCH_REPS (default 3) how many times: the whole run stays under
# ten minutes with the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${SLIDELIMIT_REDIS_ADDR:-}" ]; then
	WITH_REDIS_CLUSTER=0 exec scripts/with-redis.sh "$0" "$@"
fi
if ! command -v redis-benchmark >/dev/null; then
	echo "bench: redis-benchmark is needed: sudo apt-get install -y redis-tools" >&2
	exit 1
fi

(cd bench && go run . )

echo
echo "== allocations per decision (go test -benchmem; go-redis's included)"
(cd core && go test -run '^$' -bench '^BenchmarkAllow$' -benchmem -benchtime 5000x -count 1 .) | grep -E '^Benchmark'
echo
echo "== allocations per request of each HTTP adapter: bare route, then behind the limiter (admitted)"
for m in core/httplimit gin echo fiber; do
	echo "-- $m"
	(cd "$m" && go test -run '^$' -bench '^BenchmarkMiddleware$' -benchmem -benchtime 5000x -count 1 .) | grep -E '^Benchmark'
done
echo "(allocs/op of 'limited' minus 'bare' is what the limiter adds to the framework's own, Redis's round trip included;"
echo " for echo, minus 'noop': Echo allocates any route middleware's handler on every request)"
echo
echo "== Wait: 32 waiters per CPU on one identity; EVALSHA sent and decisions per admission"
(cd core && go test -run '^$' -bench '^BenchmarkWait$' -benchtime 3000x -count 1 .) | grep -E '^Benchmark'
echo
echo "== how long a burst's script calls keep Redis busy (SLOWLOG, private server): 64 callers, 40 decisions each"
(cd core && go test -run '^$' -bench '^BenchmarkScriptCallDuration$' -benchtime 40x -count 1 .) | grep -E '^Benchmark'
