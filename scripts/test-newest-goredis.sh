#!/usr/bin/env bash
# test-newest-goredis.sh [MODULE...]: runs the tests of MODULE (default: core,
# integration and examples) once more against the newest go-redis v9, the
# version a user gets with `go get github.com/redis/go-redis/v9`, without
# changing any go.mod. The library modules keep their tested floor
# (v9.5.5); this proves they also work with what users actually install.
#
# How: a temporary workspace lists every module of go.work plus a throwaway
# module that requires go-redis@latest, so minimal version selection picks
# the newest version for all of them. Run it under scripts/with-redis.sh,
# as make test does.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
GO=${GO:-go}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/slidelimit-newest-goredis.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

version=$(GOWORK=off "$GO" list -m -f '{{.Version}}' github.com/redis/go-redis/v9@latest)
# The newest go-redis may need a newer language version than go.work's.
goversion=$(GOWORK=off "$GO" list -m -f '{{.GoVersion}}' "github.com/redis/go-redis/v9@$version")
workgo=$("$GO" work edit -json | sed -n 's/^\t"Go": "\(.*\)",*$/\1/p')
newest=$(printf '%s\n%s\n' "$workgo" "$goversion" | sort -V | tail -1)

mkdir "$tmp/newest"
cat >"$tmp/newest/go.mod" <<EOF
module slidelimit.test/newest-goredis

go $newest

require github.com/redis/go-redis/v9 $version
EOF
printf 'package newest\n\nimport _ "github.com/redis/go-redis/v9"\n' >"$tmp/newest/newest.go"
(cd "$tmp/newest" && GOWORK=off "$GO" mod tidy >/dev/null)

mods=$("$GO" work edit -json | sed -n 's/.*"DiskPath": "\.\/\(.*\)".*/\1/p')
{
	echo "go $newest"
	echo
	echo "use ("
	for m in $mods; do echo "	$root/$m"; done
	echo "	$tmp/newest"
	echo ")"
} >"$tmp/go.work"
[ -f go.work.sum ] && cp go.work.sum "$tmp/go.work.sum"
export GOWORK=$tmp/go.work

selected=$(cd core && "$GO" list -m -f '{{.Version}}' github.com/redis/go-redis/v9)
if [ "$selected" != "$version" ]; then
	echo "test-newest-goredis: the workspace selected go-redis $selected, want $version" >&2
	exit 1
fi
# Every module runs even if one fails, so one run shows every difference.
failed=()
for m in ${@:-core integration examples}; do
	echo "== $m: go test against go-redis $version" >&2
	(cd "$m" && "$GO" test -race -count=1 ./...) || failed+=("$m")
done
if [ ${#failed[@]} -gt 0 ]; then
	echo "test-newest-goredis: failed against go-redis $version: ${failed[*]}" >&2
	exit 1
fi
