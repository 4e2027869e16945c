#!/usr/bin/env bash
# demo.sh: one limit shared by two servers.
#
# Builds examples/gin once, starts two instances of it on two loopback ports
# against the Redis in SLIDELIMIT_REDIS_ADDR, sends six GET /ping alternating
# between them, and prints each status with its RateLimit header: the limit
# is 5 per 10 s per client IP, counted in Redis, so the two servers admit five
# requests together and deny the sixth. Stops both servers when it ends,
# fails or is interrupted.
#
# Run it with `make demo`, which starts a throwaway Redis through
# scripts/with-redis.sh. Needs only bash and Go: requests go through bash's
# /dev/tcp, so curl need not be installed.
set -euo pipefail
cd "$(dirname "$0")/.."

: "${SLIDELIMIT_REDIS_ADDR:?is not set: run make demo, or scripts/with-redis.sh scripts/demo.sh}"

work=$(mktemp -d "${TMPDIR:-/tmp}/slidelimit-demo.XXXXXX")
pids=()
cleanup() {
	local status=$?
	trap - EXIT INT TERM
	local pid
	for pid in "${pids[@]}"; do
		kill -TERM "$pid" 2>/dev/null || true
	done
	for pid in "${pids[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	if [ "$status" != 0 ]; then
		for log in "$work"/*.log; do
			[ -f "$log" ] || continue
			echo "demo: log of instance $(basename "$log" .log):" >&2
			sed 's/^/    /' "$log" >&2
		done
	fi
	rm -rf "$work"
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# http_get HOST:PORT PATH prints the status line and header fields of the
# response to GET PATH, one per line, without carriage returns.
http_get() {
	local host=${1%:*} port=${1##*:} path=$2 line
	{ exec 3<>"/dev/tcp/$host/$port"; } 2>/dev/null || return 1
	printf 'GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n' "$path" "$1" >&3
	while IFS= read -r -t 5 line <&3; do
		line=${line%$'\r'}
		[ -n "$line" ] || break
		printf '%s\n' "$line"
	done
	exec 3<&- 3>&-
}

# header NAME reads a response from http_get on stdin and prints the value
# of the header field NAME (matched without regard to case).
header() {
	local want=${1,,} name value line
	while IFS= read -r line; do
		name=${line%%:*}
		value=${line#*:}
		if [ "${name,,}" = "$want" ]; then
			printf '%s\n' "${value# }"
			return
		fi
	done
}

# start NAME starts an instance of the Gin example on a loopback port the
# kernel picks, waits until it answers GET /healthz, and sets addr to its
# host:port.
start() {
	local name=$1 log="$work/$1.log" pid
	ADDR=127.0.0.1:0 REDIS_URL="redis://$SLIDELIMIT_REDIS_ADDR/0" GIN_MODE=release \
		"$work/gin-example" >"$log" 2>&1 &
	pid=$!
	pids+=("$pid")
	addr=
	for _ in $(seq 500); do
		kill -0 "$pid" 2>/dev/null || {
			echo "demo: instance $name exited" >&2
			return 1
		}
		if [ -z "$addr" ]; then
			addr=$(sed -n 's/.*listening on \(.*\)$/\1/p' "$log")
		fi
		if [ -n "$addr" ] && [ "$(http_get "$addr" /healthz | head -n 1 | cut -d ' ' -f 2)" = 200 ]; then
			return
		fi
		sleep 0.02
	done
	echo "demo: instance $name did not answer within 10 s" >&2
	return 1
}

# With empty caches the build downloads and compiles Gin, go-redis and their
# dependencies (about 90 s on 2 cores): -v names each package as it is
# compiled, so a first run is never silent. A warm build prints nothing.
echo "demo: building examples/gin (the first run downloads and compiles about 140 packages)" >&2
(cd examples && go build -v -o "$work/gin-example" ./gin 2>&1 | sed -u 's/^/demo:   /' >&2)

start A
addr_a=$addr
start B
addr_b=$addr
echo "Redis at $SLIDELIMIT_REDIS_ADDR; instance A at $addr_a, instance B at $addr_b; limit 5 per 10 s per client IP"
echo

got=()
for i in 1 2 3 4 5 6; do
	if [ $((i % 2)) = 1 ]; then
		name=A addr=$addr_a
	else
		name=B addr=$addr_b
	fi
	response=$(http_get "$addr" /ping) || {
		echo "demo: GET /ping on instance $name failed" >&2
		exit 1
	}
	status=$(head -n 1 <<<"$response" | cut -d ' ' -f 2)
	rl=$(header ratelimit <<<"$response")
	line="request $i -> instance $name ($addr): $status  RateLimit: ${rl:-(none)}"
	if retry=$(header retry-after <<<"$response") && [ -n "$retry" ]; then
		line+="  Retry-After: $retry"
	fi
	echo "$line"
	got+=("$status")
done

echo
if [ "${got[*]}" = "200 200 200 200 200 429" ]; then
	echo "one limit shared by two servers: five 200s, then 429"
else
	echo "demo: got ${got[*]}, want 200 200 200 200 200 429" >&2
	exit 1
fi
