#!/usr/bin/env bash
# release.sh vX.Y.Z [--tag]: checks that the tree can be released as
# vX.Y.Z and prints the tags to make, in order; with --tag it makes them
# (annotated, local: pushing stays a separate, deliberate step).
#
# Every library module (scripts/release-modules.sh: the modules go.work
# lists except examples, integration, bench and scripts/) is tagged
# "<folder>/vX.Y.Z", core first, then each module after the slidelimit
# modules it requires. The checks, all of which must pass:
#   - the working tree is clean, and HEAD is not already tagged at vX.Y.Z;
#   - CHANGELOG.md has a "## vX.Y.Z (YYYY-MM-DD)" heading;
#   - no library go.mod has a toolchain line, and every slidelimit module a
#     library module requires is required at vX.Y.Z or at a version already
#     tagged (never v0.0.0, never a version this release does not make);
#   - scripts/release-check.sh passes at vX.Y.Z: every module installs with
#     a plain go get from a file proxy of this tree, and every example
#     builds when its folder is copied alone.
# It cannot see whether `make test` passed on this commit: run it (or look
# at CI) before you push the tags.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
	echo "usage: scripts/release.sh vX.Y.Z [--tag]" >&2
	exit 2
}
version=${1:-}
[[ "$version" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] || usage
make_tags=0
case "${2:-}" in
"") ;;
--tag) make_tags=1 ;;
*) usage ;;
esac

prefix=github.com/slidelimit/slidelimit
problems=()
problem() {
	echo "release: $*" >&2
	problems+=("$*")
}

if [ -n "$(git status --porcelain)" ]; then
	problem "the working tree is not clean (git status): commit or stash first"
fi
grep -Eq "^## $version \([0-9]{4}-[0-9]{2}-[0-9]{2}\)\$" CHANGELOG.md ||
	problem "CHANGELOG.md has no '## $version (YYYY-MM-DD)' heading: date the release's section"

mods=$(scripts/release-modules.sh)
for m in $mods; do
	if git rev-parse -q --verify "refs/tags/$m/$version" >/dev/null; then
		problem "tag $m/$version exists already"
	fi
	grep -q '^toolchain ' "$m/go.mod" && problem "$m/go.mod has a toolchain line"
	while read -r path v; do
		[[ "$path" == "$prefix"/* ]] || continue
		dep=${path#"$prefix"/}
		if [ "$v" = "$version" ] && grep -qx "$dep" <<<"$mods"; then
			continue # tagged by this release, before $m
		fi
		git rev-parse -q --verify "refs/tags/$dep/$v" >/dev/null ||
			problem "$m/go.mod requires $path $v, which is neither tagged nor made by this release"
	done < <(awk '
		/^require \($/ { inreq = 1; next }
		inreq && /^\)/ { inreq = 0; next }
		inreq && NF >= 2 { print $1, $2 }
		/^require [^(]/ { print $2, $3 }
	' "$m/go.mod")
done

echo "release: running scripts/release-check.sh at $version" >&2
RELEASE_VERSION=$version scripts/release-check.sh || problem "scripts/release-check.sh failed at $version"

if [ "${#problems[@]}" -gt 0 ]; then
	echo "release: $version cannot be tagged: ${#problems[@]} problem(s) above" >&2
	exit 1
fi

tags=()
for m in $mods; do
	tags+=("$m/$version")
done
commit=$(git rev-parse --short HEAD)
echo "# make sure 'make test' passed on $commit (CI runs .ci/run), then:"
for t in "${tags[@]}"; do
	echo "git tag -a $t -m '${t%/*} $version' $commit"
	if [ "$make_tags" = 1 ]; then
		git tag -a "$t" -m "${t%/*} $version" "$commit"
	fi
done
echo "git push origin ${tags[*]}"
if [ "$make_tags" = 1 ]; then
	echo "release: made ${#tags[@]} tags on $commit; push them with the last command above" >&2
fi
