#!/usr/bin/env bash
# script-cost.sh: what one admission of the allow script costs inside Redis, beside the
# classic sliding-log script (bench/main.go's classicSource) and ulule/limiter's
# fixed-window script, on one server.
#
#   WITH_REDIS_CLUSTER=0 scripts/with-redis.sh scripts/script-cost.sh
#
# Each round runs redis-benchmark with EVALSHA on the allowed path (1 limit,
# 1,000,000 per minute, cost 1, Redis TIME; exact, and as "stepped" in steps
# of 41,666 µs as Limit.Stepped makes it; the classic script with a fixed
# `now` and a `<ms>-<uuid>`-sized member), the scripts interleaved, after
# FLUSHALL and CONFIG RESETSTAT, and prints per call:
#   usec   INFO commandstats usec_per_call of evalsha (time inside the script)
#   cpu    INFO cpu (used_cpu_user + used_cpu_sys) delta / calls, network included
# then the median and the minimum of the rounds for each script.
#
# SCRIPT_COST_BASE=REV      also measures the allow script as of git revision REV
# SCRIPT_COST_REPS=7        rounds
# SCRIPT_COST_N=50000       calls per script and round
# SCRIPT_COST_CLIENTS=16    redis-benchmark -c
# SCRIPT_COST_IDENTITIES=1000  keys the calls spread over (redis-benchmark -r)
# SCRIPT_COST_CALLGRIND=1   instead: instructions per decision (valgrind's
#                           callgrind, a server of its own on a unix socket, 2,000
#                           decisions over 100 keys after as many to warm them up):
#                           exact and repeatable, so it ranks variants on a noisy
#                           machine where the times vary by tens of percent. It
#                           adds a script that does nothing (the cost of any
#                           EVALSHA) and allow.lua's batch form, B requests a call,
#                           for each B in SCRIPT_COST_BATCHES (default "4 16").
# SCRIPT_COST_INFLIGHT=16   instead: that many decisions in flight at once, with
#                           redis-benchmark as a client that costs nothing per
#                           decision: ulule's and the classic script on that many
#                           connections, then allow.lua grouped every way (one call
#                           per connection, pipelined on 4 connections, batches of
#                           2, 4, 8 on fewer connections). Prints decisions/s and
#                           Redis CPU per decision. Redis is pinned to CPU 0 and
#                           redis-benchmark to CPU 1 when taskset and two cores
#                           are there, so the client never takes Redis's core.
#
# Request ids are three __rand_int__ (38 bytes; slidelimit sends 8), so the
# keys stay distinct; the classic script's `now` cannot advance under
# redis-benchmark, so its members insert by name, not at the end of the set.
set -euo pipefail
cd "$(dirname "$0")/.."

reps=${SCRIPT_COST_REPS:-7}
n=${SCRIPT_COST_N:-50000}
clients=${SCRIPT_COST_CLIENTS:-16}
identities=${SCRIPT_COST_IDENTITIES:-1000}

work=$(mktemp -d "${TMPDIR:-/tmp}/script-cost.XXXXXX")
vpid=
cleanup() {
	if [ -n "$vpid" ]; then
		kill "$vpid" 2>/dev/null || true
		wait "$vpid" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

# The allow script as core/internal/script/script.go assembles it: "allow"
# for any plan, "exact" for plans of exact limits only, "stepped" for plans
# of one stepped log (before that form, the allow script).
allow_source() { # FORM [REV]: the files as of git revision REV, or the working tree
	local d=core/internal/script f files=(prelude exact stepped inflight decide)
	[ "$1" = exact ] && files=(prelude exact decide)
	if [ "$1" = stepped ] && grep -q steppedLogSource "$d/script.go" 2>/dev/null; then
		files=(prelude stepped decide)
	fi
	for f in "${files[@]}"; do
		if [ -n "${2:-}" ]; then git show "$2:$d/$f.lua"; else cat "$d/$f.lua"; fi
	done
}
allow_source allow >"$work/allow.lua"
allow_source exact >"$work/exact.lua"
allow_source stepped >"$work/stepped.lua"
names=(exact allow stepped)
if [ -n "${SCRIPT_COST_BASE:-}" ]; then
	# Before the scripts moved to core/internal/script, one file with
	# another argument format (see args below); after, its exact form.
	if git cat-file -e "$SCRIPT_COST_BASE:core/allow.lua" 2>/dev/null; then
		git show "$SCRIPT_COST_BASE:core/allow.lua" >"$work/allow@$SCRIPT_COST_BASE.lua"
	else
		allow_source exact "$SCRIPT_COST_BASE" >"$work/allow@$SCRIPT_COST_BASE.lua"
	fi
	names+=("allow@$SCRIPT_COST_BASE")
fi
sed -n '/^const classicSource = `/,/^`/p' bench/main.go | sed '1d;$d' >"$work/classic.lua"
names+=(classic)
# ulule/limiter v3's Redis store script (INCRBY, then PEXPIRE or PTTL): the
# fixed-window peer, for scale.
cat >"$work/ulule.lua" <<'LUA'
local key = KEYS[1]
local count = tonumber(ARGV[1])
local ttl = tonumber(ARGV[2])
local ret = redis.call("incrby", key, ARGV[1])
if ret == count then
	if ttl > 0 then
		redis.call("pexpire", key, ARGV[2])
	end
	return {ret, ttl}
end
ttl = redis.call("pttl", key)
return {ret, ttl}
LUA
names+=(ulule)

# args NAME SHA: the EVALSHA command line of script NAME.
args() {
	case $1 in
	ulule) echo EVALSHA "$2" 1 "u{__rand_int__}" 1 60000 ;;
	classic) echo EVALSHA "$2" 1 "c{__rand_int__}" 1764000000000 60000 1000000 "1764000000000-__rand_int__-__rand_int__-__rand_int__" ;;
	allow@*) if grep -q '^-- ARGV\[2+2i\]' "$work/$1.lua"; then # the one-file format
		echo EVALSHA "$2" 1 "s{__rand_int__}:q" 1 "__rand_int__-__rand_int__-__rand_int__" '""' 1000000 60000000
	else
		echo EVALSHA "$2" 1 "s{__rand_int__}:q" 1 "__rand_int__-__rand_int__-__rand_int__" '""' 0 1 1000000 60000000
	fi ;;
	stepped) echo EVALSHA "$2" 1 "s{__rand_int__}:q:#41666" 1 "__rand_int__-__rand_int__-__rand_int__" '""' 41666 1 1000000 60000000 ;;
	*) echo EVALSHA "$2" 1 "s{__rand_int__}:q" 1 "__rand_int__-__rand_int__-__rand_int__" '""' 0 1 1000000 60000000 ;;
	esac
}

# batchArgs SHA B: allow.lua's batch form, B requests of B identities.
batchArgs() {
	local a=(EVALSHA "$1" "$2") i
	for i in $(seq "$2"); do a+=("s{__rand_int__}:q$i"); done
	a+=('*')
	for i in $(seq "$2"); do a+=(1 1 "__rand_int__-$i-__rand_int__" '' 0 1 1000000 60000000); done
	printf '%s\n' "${a[@]}"
}

if [ "${SCRIPT_COST_CALLGRIND:-0}" = 1 ]; then
	sock=$work/redis.sock
	valgrind --tool=callgrind --callgrind-out-file="$work/callgrind.%p" \
		redis-server --port 0 --unixsocket "$sock" --save '' --appendonly no --dir "$work" >"$work/valgrind.log" 2>&1 &
	vpid=$!
	for _ in $(seq 600); do
		[ "$(redis-cli -s "$sock" ping 2>/dev/null)" = PONG ] && break
		sleep 0.1
	done
	# An EVALSHA that does nothing: what any script call costs.
	echo 'return 1' >"$work/nothing.lua"
	dumps=0
	# measure LABEL DECISIONS ARGS...: instructions per decision of 2,000
	# decisions after as many to warm up, the calls given by ARGS.
	measure() {
		local label=$1 decisions=$2
		shift 2
		local n=$((2000 / decisions))
		redis-benchmark -s "$sock" -n "$n" -c 4 -r 100 -q "$@" >/dev/null
		callgrind_control -z "$vpid" >/dev/null 2>&1
		redis-benchmark -s "$sock" -n "$n" -c 4 -r 100 -q "$@" >/dev/null
		callgrind_control -d "$label" "$vpid" >/dev/null 2>&1
		dumps=$((dumps + 1))
		local file="$work/callgrind.$vpid.$dumps"
		for _ in $(seq 100); do
			[ -s "$file" ] && grep -q '^totals:' "$file" && break
			sleep 0.1
		done
		ir=$(awk '/^totals:/ {print $2; exit}' "$file")
		printf '%-24s %8.0f instructions per decision\n' "$label" "$(echo "$ir / ($n * $decisions)" | bc -l)"
	}
	for name in nothing "${names[@]}"; do
		sha=$(redis-cli -s "$sock" script load "$(cat "$work/$name.lua")")
		redis-cli -s "$sock" flushall >/dev/null
		eval "set -- $(args "$name" "$sha")"
		measure "$name" 1 "$@"
	done
	# allow.lua's batch form: B requests of B identities in one call.
	sha=$(redis-cli -s "$sock" script load "$(cat "$work/allow.lua")")
	for b in ${SCRIPT_COST_BATCHES:-4 16}; do
		redis-cli -s "$sock" flushall >/dev/null
		mapfile -t batch < <(batchArgs "$sha" "$b")
		measure "allow, batch of $b" "$b" "${batch[@]}"
	done
	exit 0
fi

: "${SLIDELIMIT_REDIS_ADDR:?run under scripts/with-redis.sh}"
host=${SLIDELIMIT_REDIS_ADDR%:*}
port=${SLIDELIMIT_REDIS_ADDR##*:}
cli() { redis-cli -h "$host" -p "$port" "$@" | tr -d '\r'; }
cpu() { cli info cpu | awk -F: '/^used_cpu_(sys|user):/ {s += $2} END {printf "%.6f", s}'; }

if [ -n "${SCRIPT_COST_INFLIGHT:-}" ]; then
	f=$SCRIPT_COST_INFLIGHT
	pin=()
	if command -v taskset >/dev/null && [ "$(nproc)" -ge 2 ]; then
		taskset -pc 0 "$(cli info server | awk -F: '/^process_id:/ {print $2}')" >/dev/null
		pin=(taskset -c 1)
		where="Redis pinned to CPU 0, redis-benchmark to CPU 1"
	else
		where="unpinned"
	fi
	echo "redis $(cli info server | awk -F: '/^redis_version:/ {print $2}'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $where"
	echo "$f decisions in flight, $reps interleaved rounds of $n decisions; median (min, max) of the rounds"
	# inflight LABEL CONNS PIPELINE DECISIONS ARGS...: one round.
	inflight() {
		local label=$1 c=$2 p=$3 d=$4
		shift 4
		local calls=$((n / d))
		cli flushall >/dev/null
		local c0 c1 rps
		c0=$(cpu)
		rps=$("${pin[@]}" redis-benchmark -h "$host" -p "$port" -n "$calls" -c "$c" -P "$p" -r "$identities" -q "$@" |
			tr '\r' '\n' | grep -o '[0-9.]* requests per second' | tail -1 | cut -d' ' -f1)
		c1=$(cpu)
		printf '%s|%s %s\n' "$label" "$(echo "$rps * $d" | bc -l)" "$(echo "($c1 - $c0) * 1000000 / ($calls * $d)" | bc -l)" >>"$work/inflight"
	}
	labels=()
	for rep in $(seq "$reps"); do
		for name in ulule classic allow; do
			sha=$(cli script load "$(cat "$work/$name.lua")")
			eval "set -- $(args "$name" "$sha")"
			label="$name: $f connections, one call each"
			inflight "$label" "$f" 1 1 "$@"
			[ "$rep" = 1 ] && labels+=("$label")
		done
		if [ "$f" -ge 8 ]; then
			label="allow: 4 connections, $((f / 4)) calls pipelined"
			inflight "$label" 4 $((f / 4)) 1 "$@"
			[ "$rep" = 1 ] && labels+=("$label")
		fi
		for b in 2 4 8 16; do
			[ "$b" -lt "$f" ] || break
			mapfile -t batch < <(batchArgs "$sha" "$b")
			label="allow: $((f / b)) connections, a batch of $b each"
			inflight "$label" $((f / b)) 1 "$b" "${batch[@]}"
			[ "$rep" = 1 ] && labels+=("$label")
		done
	done
	printf '%-48s %-24s %s\n' "" "decisions/s" "Redis CPU µs per decision"
	for label in "${labels[@]}"; do
		stat() {
			awk -F'|' -v l="$label" '$1 == l {print $2}' "$work/inflight" | cut -d' ' -f"$1" | sort -g |
				awk -v f="$2" '{a[NR] = $1} END {printf f, a[int((NR + 1) / 2)], a[1], a[NR]}'
		}
		printf '%-48s %-24s %s\n' "$label" "$(stat 1 '%.0f (%.0f, %.0f)')" "$(stat 2 '%.1f (%.1f, %.1f)')"
	done
	exit 0
fi

echo "redis $(cli info server | awk -F: '/^redis_version:/ {print $2}'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "redis-benchmark -n $n -c $clients -r $identities, $reps interleaved rounds"
for rep in $(seq "$reps"); do
	for name in "${names[@]}"; do
		sha=$(cli script load "$(cat "$work/$name.lua")")
		cli flushall >/dev/null
		cli config resetstat >/dev/null
		eval "set -- $(args "$name" "$sha")"
		c0=$(cpu)
		redis-benchmark -h "$host" -p "$port" -n "$n" -c "$clients" -r "$identities" -q "$@" >/dev/null
		c1=$(cpu)
		stats=$(cli info commandstats | awk -F'[:,=]' '/^cmdstat_evalsha:/ {print $3, $7, $11}')
		read -r calls usec failed <<<"$stats"
		[ "$failed" = 0 ] || { echo "script-cost: $name: $failed failed calls" >&2; exit 1; }
		printf '%s %s %s %s\n' "$name" "$rep" "$usec" "$(echo "($c1 - $c0) * 1000000 / $calls" | bc -l)" >>"$work/rounds"
		printf 'round %d %-24s usec %6.2f  cpu %6.2f\n' "$rep" "$name" "$usec" "$(echo "($c1 - $c0) * 1000000 / $calls" | bc -l)"
	done
done
echo "per call, median (min) of $reps rounds:"
for name in "${names[@]}"; do
	us=$(awk -v s="$name" '$1 == s {print $3}' "$work/rounds" | sort -g | awk '{a[NR] = $1} END {printf "%.2f (%.2f)", a[int((NR + 1) / 2)], a[1]}')
	cp=$(awk -v s="$name" '$1 == s {print $4}' "$work/rounds" | sort -g | awk '{a[NR] = $1} END {printf "%.2f (%.2f)", a[int((NR + 1) / 2)], a[1]}')
	printf '%-24s usec %-14s cpu %s\n' "$name" "$us" "$cp"
done
