#!/usr/bin/env bash
# test-goredis.sh VERSION [MODULE...]: runs the tests of MODULE (default:
# core, integration and examples) once more against go-redis VERSION (a
# v9 release such as v9.14.1, or "latest" for the newest, the version a user
# gets with `go get github.com/redis/go-redis/v9`), without changing any
# go.mod. The library modules keep their tested floor (v9.5.5); this proves
# they also work with what users actually install.
#
# A MODULE may name a focused subset as MODULE=REGEX, passed to go test
# -run: `integration='^TestRedisFaults$'` runs those tests alone.
#
# How: a temporary workspace lists every module of go.work plus a throwaway
# module that requires go-redis@VERSION, so minimal version selection picks
# that version for all of them (VERSION must be at least the floor). Run it
# under scripts/with-redis.sh, as make test does.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
GO=${GO:-go}

if [ $# -lt 1 ]; then
	echo "usage: $0 VERSION [MODULE[=RUN]...]" >&2
	exit 2
fi
want=$1
shift

tmp=$(mktemp -d "${TMPDIR:-/tmp}/slidelimit-goredis.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

version=$(GOWORK=off "$GO" list -m -f '{{.Version}}' "github.com/redis/go-redis/v9@$want")
# A newer go-redis may need a newer language version than go.work's.
goversion=$(GOWORK=off "$GO" list -m -f '{{.GoVersion}}' "github.com/redis/go-redis/v9@$version")
workgo=$("$GO" work edit -json | sed -n 's/^\t"Go": "\(.*\)",*$/\1/p')
langgo=$(printf '%s\n%s\n' "$workgo" "$goversion" | sort -V | tail -1)

mkdir "$tmp/pin"
cat >"$tmp/pin/go.mod" <<EOM
module slidelimit.test/goredis

go $langgo

require github.com/redis/go-redis/v9 $version
EOM
printf 'package pin\n\nimport _ "github.com/redis/go-redis/v9"\n' >"$tmp/pin/pin.go"
(cd "$tmp/pin" && GOWORK=off "$GO" mod tidy >/dev/null)

mods=$("$GO" work edit -json | sed -n 's/.*"DiskPath": "\.\/\(.*\)".*/\1/p')
{
	echo "go $langgo"
	echo
	echo "use ("
	for m in $mods; do echo "	$root/$m"; done
	echo "	$tmp/pin"
	echo ")"
} >"$tmp/go.work"
[ -f go.work.sum ] && cp go.work.sum "$tmp/go.work.sum"
export GOWORK=$tmp/go.work

selected=$(cd core && "$GO" list -m -f '{{.Version}}' github.com/redis/go-redis/v9)
if [ "$selected" != "$version" ]; then
	echo "test-goredis: the workspace selected go-redis $selected, want $version (below the floor?)" >&2
	exit 1
fi
# Every module runs even if one fails, so one run shows every difference.
failed=()
[ $# -gt 0 ] || set -- core integration examples
for arg in "$@"; do
	m=${arg%%=*}
	run=()
	[ "$m" != "$arg" ] && run=(-run "${arg#*=}")
	# The integration packages one at a time: each test sets the load it
	# is judged under (its own busy loops and processes), and two packages
	# at once on two cores doubled it.
	par=()
	[ "$m" = integration ] && par=(-p 1)
	echo "== $m: go test ${par[*]} ${run[*]} against go-redis $version" >&2
	(cd "$m" && "$GO" test -race -count=1 -timeout 20m "${par[@]}" "${run[@]}" ./...) || failed+=("$arg")
done
if [ ${#failed[@]} -gt 0 ]; then
	echo "test-goredis: failed against go-redis $version: ${failed[*]}" >&2
	exit 1
fi
