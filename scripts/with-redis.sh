#!/usr/bin/env bash
# with-redis.sh COMMAND...: runs COMMAND with a throwaway Redis.
#
# Starts one standalone redis-server and a Redis Cluster of three primaries,
# each with one replica, on free loopback ports; exports their addresses as
#   SLIDELIMIT_REDIS_ADDR           host:port of the standalone server
#   SLIDELIMIT_REDIS_CLUSTER_ADDRS  host:port,host:port,... of the primaries
#   SLIDELIMIT_REQUIRE_REDIS=1      tests fail, never skip, without Redis
# and stops every server it started when COMMAND ends, fails or is interrupted.
# Set WITH_REDIS_CLUSTER=0 to start the standalone server alone.
set -euo pipefail

need_redis() {
	if command -v redis-server >/dev/null && command -v redis-cli >/dev/null; then
		return
	fi
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		echo "with-redis: installing redis-server and redis-tools from the OS packages" >&2
		apt-get update -qq >&2
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools >&2
		return
	fi
	echo "with-redis: redis-server and redis-cli are needed. Install them with:" >&2
	echo "    sudo apt-get install -y redis-server redis-tools" >&2
	exit 1
}
need_redis

dir=$(mktemp -d "${TMPDIR:-/tmp}/slidelimit-redis.XXXXXX")
cleanup() {
	local status=$?
	trap - EXIT INT TERM
	for pidfile in "$dir"/*.pid; do
		[ -f "$pidfile" ] || continue
		kill -9 "$(cat "$pidfile")" 2>/dev/null || true
	done
	rm -rf "$dir"
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# free_port prints a loopback port on which neither it nor it+10000 (the
# cluster bus) answers.
free_port() {
	local p
	for _ in $(seq 200); do
		p=$((20000 + RANDOM % 25000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null &&
			! (exec 3<>"/dev/tcp/127.0.0.1/$((p + 10000))") 2>/dev/null &&
			[ ! -e "$dir/$p.pid" ]; then
			echo "$p"
			return
		fi
	done
	echo "with-redis: no free port found" >&2
	return 1
}

# start PORT [ARGS...] starts a redis-server in the background and waits for PONG.
start() {
	local port=$1
	shift
	redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
		--daemonize yes --dir "$dir" --pidfile "$dir/$port.pid" --logfile "$dir/$port.log" "$@"
	for _ in $(seq 500); do
		if [ "$(redis-cli -p "$port" ping 2>/dev/null)" = PONG ]; then
			return
		fi
		sleep 0.01
	done
	echo "with-redis: redis-server on port $port did not start:" >&2
	cat "$dir/$port.log" >&2
	return 1
}

# start_free [ARGS...] starts a server on a free port and prints the port.
start_free() {
	local port
	for _ in 1 2 3 4 5; do
		port=$(free_port)
		if start "$port" "$@" >/dev/null 2>&1; then
			echo "$port"
			return
		fi
		rm -f "$dir/$port.pid"
	done
	echo "with-redis: could not start redis-server" >&2
	return 1
}

standalone=$(start_free)
export SLIDELIMIT_REDIS_ADDR="127.0.0.1:$standalone"
echo "with-redis: standalone Redis at $SLIDELIMIT_REDIS_ADDR" >&2

if [ "${WITH_REDIS_CLUSTER:-1}" != 0 ]; then
	nodes=()
	for _ in 1 2 3 4 5 6; do
		p=$(start_free --cluster-enabled yes --cluster-config-file "nodes-$RANDOM$RANDOM.conf" --cluster-node-timeout 2000)
		nodes+=("127.0.0.1:$p")
	done
	redis-cli --cluster create "${nodes[@]}" --cluster-replicas 1 --cluster-yes >"$dir/cluster-create.log" 2>&1 || {
		cat "$dir/cluster-create.log" >&2
		exit 1
	}
	# Wait until every node agrees the cluster is ok and all slots are served.
	for node in "${nodes[@]}"; do
		port=${node##*:}
		ok=
		for _ in $(seq 1000); do
			if redis-cli -p "$port" cluster info 2>/dev/null | grep -q '^cluster_state:ok'; then
				ok=1
				break
			fi
			sleep 0.01
		done
		[ -n "$ok" ] || {
			echo "with-redis: cluster node $node is not ok" >&2
			exit 1
		}
	done
	primaries=$(IFS=,; echo "${nodes[*]:0:3}")
	export SLIDELIMIT_REDIS_CLUSTER_ADDRS="$primaries"
	echo "with-redis: Redis Cluster at $SLIDELIMIT_REDIS_CLUSTER_ADDRS (3 primaries, 3 replicas)" >&2
fi

export SLIDELIMIT_REQUIRE_REDIS=1
"$@"
