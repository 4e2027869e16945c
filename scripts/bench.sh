#!/usr/bin/env bash
# bench.sh: how fast Allow decides, next to what Redis itself can do.
#
# Runs BenchmarkAllow (integration/bench_test.go) at 1, 16, 64 and 256
# goroutines against one standalone Redis, then redis-benchmark running the
# same core/allow.lua by EVALSHA, with the same key pattern and arguments, at
# as many clients; prints decisions/s of both and their ratio, and the Redis
# memory one in-window request takes. Every call is admitted (the quota is
# 1,000,000 per minute), so every call writes.
#
# make bench runs it under scripts/with-redis.sh; run alone, it starts its
# own Redis the same way. BENCH_N (default 30000) is the number of calls of
# each run, so the whole script stays within a minute or two.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${SLIDELIMIT_REDIS_ADDR:-}" ]; then
	WITH_REDIS_CLUSTER=0 exec scripts/with-redis.sh "$0" "$@"
fi
if ! command -v redis-benchmark >/dev/null; then
	echo "bench: redis-benchmark is needed: sudo apt-get install -y redis-tools" >&2
	exit 1
fi

n=${BENCH_N:-30000}
levels="1 16 64 256"
host=${SLIDELIMIT_REDIS_ADDR%:*}
port=${SLIDELIMIT_REDIS_ADDR##*:}
# Must match benchKeyspace and benchLimit in integration/bench_test.go.
keyspace=100000
quota=1000000
window_us=60000000
tmp=$(mktemp -d "${TMPDIR:-/tmp}/slidelimit-bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

echo "== $(redis-server --version | cut -d' ' -f1-3), $(go version | cut -d' ' -f3), $(nproc) cores, $n calls per run"
echo "== go test -bench: Allow, key bench:go:{<12-digit id below $keyspace>}:1000000/1m"
(cd integration && go test -run '^$' -bench '^BenchmarkAllow$' -benchtime "${n}x" -count 1 .) | tee "$tmp/go.txt"

echo
echo "== redis-benchmark: EVALSHA allow.lua, key bench:rb:{__rand_int__}:1000000/1m, -r $keyspace"
sha=$(redis-cli -h "$host" -p "$port" SCRIPT LOAD "$(cat core/allow.lua)")
for c in $levels; do
	# ARGV as in allow.lua's header: cost 1, a request id, "" for Redis
	# TIME, then the quota and the window in microseconds.
	rps=$(redis-benchmark -h "$host" -p "$port" -c "$c" -n "$n" -r "$keyspace" --csv \
		EVALSHA "$sha" 1 "bench:rb:{__rand_int__}:1000000/1m" 1 __rand_int__ "" "$quota" "$window_us" |
		awk -F'","' '$1 ~ /EVALSHA/ { print $2 }')
	if [ -z "$rps" ]; then
		echo "bench: redis-benchmark -c $c printed no result" >&2
		exit 1
	fi
	echo "clients=$c $rps requests/s"
	echo "$c $rps" >>"$tmp/rb.txt"
done

# go-rates.txt: "<client> <goroutines> <decisions/s>" per Go benchmark.
awk '/^BenchmarkAllow\/client=/ {
	name = $1; sub(/^BenchmarkAllow\/client=/, "", name); sub(/-[0-9]+$/, "", name)
	split(name, part, "/goroutines=")
	for (i = 2; i <= NF; i++) if ($i == "decisions/s") print part[1], part[2], $(i - 1)
}' "$tmp/go.txt" >"$tmp/go-rates.txt"

echo
echo "== decisions per second (Go: Allow through go-redis, with ContextTimeoutEnabled and with a default client; redis-benchmark: the bare script)"
printf '%-20s %14s %14s %16s %8s %8s\n' "goroutines/clients" "Go ctxtimeout" "Go default" "redis-benchmark" "ratio" "ratio"
for c in $levels; do
	g=$(awk -v c="$c" '$1 == "ctxtimeout" && $2 == c { print $3 }' "$tmp/go-rates.txt")
	d=$(awk -v c="$c" '$1 == "default" && $2 == c { print $3 }' "$tmp/go-rates.txt")
	r=$(awk -v c="$c" '$1 == c { print $2 }' "$tmp/rb.txt")
	if [ -z "$g" ] || [ -z "$d" ] || [ -z "$r" ]; then
		echo "bench: no figure for $c goroutines/clients (go: '$g', '$d', redis-benchmark: '$r')" >&2
		exit 1
	fi
	awk -v c="$c" -v g="$g" -v d="$d" -v r="$r" 'BEGIN { printf "%-20s %14.0f %14.0f %16.0f %8.2f %8.2f\n", c, g, d, r, g / r, d / r }'
done
echo "(ratio = Go decisions/s over redis-benchmark's, for each Go client in turn)"

echo
echo "== Redis memory per in-window request (MEMORY USAGE; TestMemoryPerRequest)"
(cd integration && go test -run '^TestMemoryPerRequest$' -count 1 -v .) >"$tmp/mem.txt" || {
	cat "$tmp/mem.txt"
	exit 1
}
awk '/requests +encoding/ { on = 1 } on && (NF == 6 || /encoding/) { sub(/^ +/, ""); print } /^--- / { on = 0 }' "$tmp/mem.txt"
echo "(B/request = (usage(k) - usage(1)) / (k - 1); naive = members \"<13-digit ms>-<36-char uuid>\" with the same scores)"
