#!/usr/bin/env bash
# bench-pair.sh: the bench of git revision BASE and of the working tree, run
# in turns against one throwaway Redis, so that a host whose speed drifts over
# minutes drifts for both: decisions/s of slidelimit and of each peer, then,
# per path and number of callers, the median over the rounds of
#   (tree's slidelimit ÷ peer) ÷ (BASE's slidelimit ÷ peer)
# for each peer (the peers are the same code in both builds, so they stand
# for the host's speed at that moment), and the ratio of slidelimit's own
# decisions/s, tree ÷ BASE, each with its least and greatest round in
# brackets. Above 1: the tree is faster. Both builds run this tree's
# harness (bench/*.go) on their own limiter, and the contenders' order
# turns with the round.
#
#   scripts/bench-pair.sh BASE [ROUNDS]
#
# BENCH_CELL (1s), BENCH_LEVELS (1,16,64,256), BENCH_PATHS (allowed,stepped)
# and BENCH_CONTENDERS (slidelimit,classic,redis_rate,ulule) pass to both;
# BENCH_PAIR_RATES=file keeps every cell's decisions/s ("build round path
# callers contender rate").
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:?usage: $0 BASE [ROUNDS]}
rounds=${2:-4}

if [ -z "${SLIDELIMIT_REDIS_ADDR:-}" ]; then
	WITH_REDIS_CLUSTER=0 exec scripts/with-redis.sh "$0" "$@"
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/bench-pair.XXXXXX")
trap 'git worktree remove --force "$work/base" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git worktree add --detach "$work/base" "$base" >/dev/null 2>&1
# BASE's limiter, this tree's harness, so that both measure alike.
cp bench/*.go "$work/base/bench/"
(cd "$work/base/bench" && go build -o "$work/bench-base" .)
(cd bench && go build -o "$work/bench-tree" .)

export BENCH_CELL=${BENCH_CELL:-1s} BENCH_REPS=1 BENCH_SKIP_MEMORY=1
export BENCH_LEVELS=${BENCH_LEVELS:-1,16,64,256} BENCH_PATHS=${BENCH_PATHS:-allowed,stepped}
export BENCH_CONTENDERS=${BENCH_CONTENDERS:-slidelimit,classic,redis_rate,ulule}
echo "bench-pair: $base against the working tree, $rounds rounds of each, in turns; cells of $BENCH_CELL"
for r in $(seq "$rounds"); do
	for b in base tree; do
		redis-cli -h "${SLIDELIMIT_REDIS_ADDR%:*}" -p "${SLIDELIMIT_REDIS_ADDR##*:}" flushall >/dev/null
		# Rows "name | rate/s ..." of each path's decisions/s table, as
		# "build round path level name rate".
		dir=bench
		[ "$b" = base ] && dir=$work/base/bench
		# The contenders' order turns with the round (BENCH_ROTATE), the
		# same for both builds: no contender runs first in every round.
		(cd "$dir" && BENCH_ROTATE=$r "$work/bench-$b") | awk -v b="$b" -v r="$r" '
			/^== .* path: decisions\/s/ { path = $2; table = 1; next }
			/^== / { table = 0 }
			table && /^callers/ { n = split($0, h, "|"); for (i = 2; i <= n; i++) { gsub(/[^0-9]/, "", h[i]); lvl[i] = h[i] } next }
			table && NF > 2 && $0 ~ /\/s/ { n = split($0, c, "|"); name = c[1]; gsub(/ /, "", name)
				for (i = 2; i <= n; i++) { split(c[i], f, " "); rate = f[1]; sub(/\/s/, "", rate); if (rate != "-") print b, r, path, lvl[i], name, rate } }
		' >>"$work/rates"
	done
	echo "round $r done"
done
# median(a, n): the median of a[1..n], which it sorts; spread(a, n): the
# median and, in brackets, the least and the greatest.
median='function median(a, n,   i, j, t) {
	for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
	return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
function spread(a, n,   m) {
	m = median(a, n)
	return sprintf("%.3f (%.2f-%.2f)", m, a[1], a[n])
}'
awk "$median"'
	{ rate[$1, $2, $3, $4, $5] = $6; paths[$3] = 1; levels[$4] = 1; names[$5] = 1; rounds[$2] = 1 }
	END {
		for (p in paths) for (l in levels) {
			line = sprintf("%-8s c=%-4s", p, l)
			n = 0
			for (r in rounds) if (rate["tree", r, p, l, "slidelimit"] && rate["base", r, p, l, "slidelimit"]) { v[++n] = rate["tree", r, p, l, "slidelimit"] / rate["base", r, p, l, "slidelimit"] }
			if (n == 0) continue
			line = line "  own " spread(v, n)
			for (q in names) {
				if (q == "slidelimit") continue
				n = 0
				for (r in rounds) {
					t = rate["tree", r, p, l, q]; s = rate["base", r, p, l, q]
					if (t && s) v[++n] = (rate["tree", r, p, l, "slidelimit"] / t) / (rate["base", r, p, l, "slidelimit"] / s)
				}
				if (n) line = line sprintf("  vs %s %s", q, spread(v, n))
			}
			print line
		}
	}' "$work/rates" | sort
echo
echo "tree's slidelimit ÷ each peer, median over the rounds:"
awk "$median"'
	$1 == "tree" { rate[$2, $3, $4, $5] = $6; k[$3 " " $4] = 1; names[$5] = 1; rounds[$2] = 1 }
	END { for (c in k) { split(c, pl, " "); line = sprintf("%-8s c=%-4s", pl[1], pl[2])
		for (q in names) { if (q == "slidelimit") continue; n = 0
			for (r in rounds) if (rate[r, pl[1], pl[2], q]) v[++n] = rate[r, pl[1], pl[2], "slidelimit"] / rate[r, pl[1], pl[2], q]
			if (n) line = line sprintf("  ÷%s %.2f", q, median(v, n)) }
		print line } }' "$work/rates" | sort
cp "$work/rates" "${BENCH_PAIR_RATES:-/dev/null}" 2>/dev/null || true
