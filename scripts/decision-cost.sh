#!/usr/bin/env bash
# decision-cost.sh: what the limiter's decisions cost Redis, in instructions
# counted by valgrind's callgrind, through the limiter itself (its own
# request ids and batching; bench/decisioncost says how):
#
#   scripts/decision-cost.sh [BASE]
#
# For the working tree, and for git revision BASE if given, one exact
# limit, one stepped limit, one stepped limit whose logs are older than its
# window and one whose identities admit several requests a step
# (bench/decisioncost's kinds), a lone caller and 16:
# instructions inside Redis per
# decision (everything the server ran between two callgrind dumps: the
# event loop, the commands, their replies) and decisions per EVALSHA.
# Exact and repeatable where times on a shared two-core machine vary by
# tens of percent, so it ranks variants of the scripts; make bench measures
# what they are worth in decisions per second. Needs valgrind and
# redis-server; each figure takes about 20 s.
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in valgrind callgrind_control redis-server redis-cli; do
	if ! command -v "$tool" >/dev/null; then
		echo "decision-cost: $tool is needed: sudo apt-get install -y valgrind redis-server redis-tools" >&2
		exit 1
	fi
done

work=$(mktemp -d "${TMPDIR:-/tmp}/decision-cost.XXXXXX")
vpid=
cleanup() {
	if [ -n "$vpid" ]; then
		kill "$vpid" 2>/dev/null || true
		wait "$vpid" 2>/dev/null || true
	fi
	git worktree remove --force "$work/base" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT

builds=(tree)
(cd bench && go build -o "$work/decisioncost-tree" ./decisioncost)
if [ -n "${1:-}" ]; then
	git worktree add --detach "$work/base" "$1" >/dev/null 2>&1
	# BASE's limiter, this tree's harness.
	rm -rf "$work/base/bench/decisioncost"
	cp -r bench/decisioncost "$work/base/bench/"
	(cd "$work/base/bench" && go build -o "$work/decisioncost-base" ./decisioncost)
	builds+=(base)
fi

# measure BUILD KIND CALLERS: one figure, on a server of its own.
measure() {
	local dir=$work/$1-$2-$3 file
	mkdir -p "$dir"
	valgrind --tool=callgrind --callgrind-out-file="$dir/callgrind.%p" \
		redis-server --port 0 --unixsocket "$dir/redis.sock" --save '' --appendonly no --dir "$dir" >"$dir/valgrind.log" 2>&1 &
	vpid=$!
	for _ in $(seq 600); do
		[ "$(redis-cli -s "$dir/redis.sock" ping 2>/dev/null)" = PONG ] && break
		sleep 0.1
	done
	local out
	out=$("$work/decisioncost-$1" "$dir/redis.sock" "$vpid" "$2" "$3")
	file=$dir/callgrind.$vpid.1
	for _ in $(seq 100); do
		[ -s "$file" ] && grep -q '^totals:' "$file" && break
		sleep 0.1
	done
	kill "$vpid" 2>/dev/null || true
	wait "$vpid" 2>/dev/null || true
	vpid=
	local ir n calls
	ir=$(awk '/^totals:/ {print $2; exit}' "$file")
	n=$(echo "$out" | awk '{print $2}')
	calls=$(echo "$out" | awk '{print $4}')
	printf '%-5s %-8s %3d callers %9.0f instructions per decision  %5.2f decisions per EVALSHA\n' \
		"$1" "$2" "$3" "$(echo "$ir / $n" | bc -l)" "$(echo "$n / $calls" | bc -l)"
}

[ -n "${1:-}" ] && echo "base: $1 ($(git rev-parse --short "$1")); tree: the working tree"
for kind in exact stepped aged dense; do
	for callers in 1 16; do
		for b in "${builds[@]}"; do
			measure "$b" "$kind" "$callers"
		done
	done
done
