#!/usr/bin/env bash
# release-check.sh: proves that a user outside this repository can use what
# the next release will publish, before anything is tagged.
#
# 1. Checks every library module's go.mod (scripts/release-modules.sh lists
#    them): no toolchain line, and every slidelimit module it requires is
#    required at a real version, no newer than the release.
# 2. Publishes every library module of the working tree at the release
#    version into a file-based module proxy (scripts/modproxy, zips made by
#    golang.org/x/mod/zip, with the root LICENSE as the go command adds it).
# 3. In a fresh module outside the workspace, `go get`s each library module
#    from that proxy, builds its packages, runs `go doc <import path>` as
#    the READMEs show, and checks that `go list -m all`
#    holds no web or RPC framework the module does not itself require (gin
#    pulls no fiber, echo or gRPC, and so on).
# 4. Copies each example program folder alone, as its README tells a user
#    to (`go mod init example.com/x && go mod tidy`), then builds it and runs
#    its tests (five 200s, then 429, against real Redis: the one in
#    SLIDELIMIT_REDIS_ADDR, or a private redis-server): the copy resolves the
#    newest releases of its framework and of go-redis, and the slidelimit
#    modules from the proxy at the release version. The same framework
#    check applies, against the frameworks the example itself imports.
#
# Everything runs with GOWORK=off and GOFLAGS=-mod=mod, and GOPROXY set to
# file://<proxy>,$(go env GOPROXY): third-party modules come from the usual
# proxy. GONOSUMDB keeps the slidelimit modules, which exist only in the
# local proxy, away from the checksum database. The usual module and build
# caches are reused, so only what changed is downloaded or compiled; the
# module cache's copies of the slidelimit modules are dropped first (a stale
# zip of the same version would be used otherwise), under a lock so that two
# working trees checking at once cannot see each other's modules, and the
# module index is off (GODEBUG=goindex=0, see below).
#
# The release version is $RELEASE_VERSION, or else the first "## vX.Y.Z"
# heading of CHANGELOG.md. Every failure is reported; the exit status is 1
# if there was any.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
prefix=github.com/slidelimit/slidelimit
frameworks='^(github\.com/gin-gonic/gin|github\.com/gofiber/fiber(/v[0-9]+)?|github\.com/labstack/echo(/v[0-9]+)?|google\.golang\.org/grpc)$'

version=${RELEASE_VERSION:-$(sed -n 's/^## \[\{0,1\}\(v[0-9][0-9.]*\)\]\{0,1\}\( .*\)\{0,1\}$/\1/p' CHANGELOG.md 2>/dev/null | head -n 1)}
if ! [[ "$version" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
	echo "release-check: no release version: set RELEASE_VERSION=vX.Y.Z or add a '## vX.Y.Z' heading to CHANGELOG.md" >&2
	exit 1
fi

start=$SECONDS
failures=()
fail() {
	echo "release-check: FAIL: $*" >&2
	failures+=("$*")
}
step() {
	printf 'release-check: %-60s (%ds)\n' "$*" $((SECONDS - start)) >&2
}

# requires GOMOD prints "path version" for each requirement in GOMOD.
requires() {
	awk '
		/^require \($/ { inreq = 1; next }
		inreq && /^\)/ { inreq = 0; next }
		inreq && NF >= 2 { print $1, $2 }
		/^require [^(]/ { print $2, $3 }
	' "$1"
}

# vle A B reports whether version A <= version B (both vX.Y.Z).
vle() {
	[ "$(printf '%s\n%s\n' "${1#v}" "${2#v}" | sort -V | head -n 1)" = "${1#v}" ]
}

# check_frameworks WHAT DIR ALLOWED checks that `go list -m all` in DIR
# lists no framework other than those in ALLOWED (space-separated paths).
check_frameworks() {
	local what=$1 dir=$2 allowed=" $3 " m
	local mods
	if ! mods=$(cd "$dir" && go list -m -f '{{.Path}}' all 2>&1); then
		fail "$what: go list -m all: $mods"
		return
	fi
	for m in $(grep -E "$frameworks" <<<"$mods" || true); do
		[[ "$allowed" == *" $m "* ]] || fail "$what pulls in $m (allowed: ${3:-no framework})"
	done
}

# direct_frameworks GOMOD prints the frameworks GOMOD requires directly.
direct_frameworks() {
	grep -v '// indirect' "$1" | requires /dev/stdin | awk '{print $1}' | grep -E "$frameworks" | tr '\n' ' ' || true
}

mods=$(scripts/release-modules.sh)
step "version $version; library modules: $(echo $mods)"

# 1. go.mod requirements.
for m in $mods; do
	grep -q '^toolchain ' "$m/go.mod" && fail "$m/go.mod has a toolchain line"
	while read -r path v; do
		[[ "$path" == "$prefix"/* ]] || continue
		if [ "$v" = v0.0.0 ] || ! vle "$v" "$version"; then
			fail "$m/go.mod requires $path $v: require a released version, at most $version (keep the replace for development)"
		fi
	done < <(requires "$m/go.mod")
done

# The gRPC server and client each hold the same greeter.go, so that either
# folder can be copied alone.
cmp -s examples/grpc/server/greeter.go examples/grpc/client/greeter.go ||
	fail "examples/grpc/server/greeter.go and examples/grpc/client/greeter.go differ: keep them the same"

work=$(mktemp -d "${TMPDIR:-/tmp}/slidelimit-release-check.XXXXXX")
trap 'rm -rf "$work"' EXIT

# 2. The proxy.
step "publishing the working tree at $version into file://$work/proxy"
if ! (cd scripts/modproxy && GOWORK=off go run . -root "$root" -version "$version" -out "$work/proxy" $mods) >/dev/null; then
	fail "modproxy could not publish every module with a LICENSE"
fi

export GOWORK=off GOTOOLCHAIN=local GOFLAGS=-mod=mod
# The go command indexes the packages of a module cache folder once, keyed
# by the folder's path alone (cmd/go/internal/modindex), trusting that a
# version never changes; here the same version is republished on every run,
# so a file added to or removed from a module since the last run would be
# missed. goindex=0 turns the index off.
export GODEBUG="${GODEBUG:+$GODEBUG,}goindex=0"
export GOPROXY="file://$work/proxy,$(go env GOPROXY)"
export GONOSUMDB=$prefix GONOPROXY= GOPRIVATE=
modcache=$(go env GOMODCACHE)
mkdir -p "$modcache/cache"
exec 9>"$modcache/cache/slidelimit-release-check.lock"
if ! flock -n 9; then
	step "waiting for another release check to finish with the module cache"
	flock 9
fi
for d in "$modcache/github.com/slidelimit" "$modcache/cache/download/github.com/slidelimit"; do
	if [ -e "$d" ]; then
		chmod -R u+w "$d"
		rm -rf "$d"
	fi
done

# 3. go get each library module alone.
for m in $mods; do
	path=$prefix/$m
	step "go get $path@$version"
	dir=$work/get/$m
	mkdir -p "$dir"
	if ! out=$(cd "$dir" && go mod init example.com/releasecheck 2>&1 && go get "$path@$version" 2>&1 && go build "$path/..." 2>&1 && go doc "$path" 2>&1 >/dev/null); then
		fail "go get $path@$version in a fresh module:"$'\n'"$out"
		continue
	fi
	check_frameworks "$path" "$dir" "$(direct_frameworks "$m/go.mod")"
done

# 4. Each example program, copied alone.
examples=$(grep -rl --include='*.go' --exclude='*_test.go' '^package main$' examples | xargs -n 1 dirname | sort -u)
for ex in $examples; do
	step "copy of $ex: go mod init && go mod tidy && go build && go test"
	dir=$work/copy/$ex
	mkdir -p "$(dirname "$dir")"
	cp -r "$ex" "$dir"
	if ! out=$(cd "$dir" && go mod init example.com/x 2>&1 && go mod tidy 2>&1 && go build -o /dev/null . 2>&1 && go test -count=1 ./... 2>&1); then
		fail "a copy of $ex does not build alone:"$'\n'"$out"
		continue
	fi
	while read -r path v; do
		[[ "$path" == "$prefix"/* ]] || continue
		[ "$v" = "$version" ] || fail "a copy of $ex resolves $path $v, want $version"
	done < <(requires "$dir/go.mod")
	check_frameworks "copy of $ex" "$dir" "$(direct_frameworks "$dir/go.mod")"
	grep -E '^(ok|---)' <<<"$out" | sed 's/^/    /' >&2 || true
	echo "    resolved: $(grep -E '^\s*(github\.com/(gin-gonic/gin|gofiber/fiber|labstack/echo|redis/go-redis)[^ ]*|google\.golang\.org/grpc) ' "$dir/go.mod" | awk '{print $1 "@" $2}' | tr '\n' ' ')" >&2
done

step "done"
if [ "${#failures[@]}" -gt 0 ]; then
	echo "release-check: ${#failures[@]} failure(s)" >&2
	exit 1
fi
echo "release-check: every module installs from $version alone and every example builds and passes its tests copied alone ($((SECONDS - start)) s)" >&2
