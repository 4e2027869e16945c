#!/usr/bin/env bash
# release-modules.sh: prints the folder of every library module, one a line,
# in the order they are tagged: a module comes after every slidelimit module
# it requires, so core comes first; among the rest gin, fiber, echo and
# grpcinterceptor come first, then any other, alphabetically.
#
# The library modules are the ones go.work lists, except examples,
# integration, bench and anything under scripts/: those are never tagged.
set -euo pipefail
cd "$(dirname "$0")/.."

prefix=github.com/slidelimit/slidelimit/

all=$(go work edit -json | sed -n 's/.*"DiskPath": "\.\/\(.*\)".*/\1/p' |
	grep -Ev '^(examples|integration|bench)(/|$)|^scripts/' || true)
preferred="core gin fiber echo grpcinterceptor"
candidates=()
for m in $preferred; do
	grep -qx "$m" <<<"$all" && candidates+=("$m")
done
for m in $all; do
	[[ " $preferred " == *" $m "* ]] || candidates+=("$m")
done

# deps FOLDER prints the folders of the slidelimit modules FOLDER requires.
deps() {
	awk -v p="$prefix" '
		/^require \($/ { inreq = 1; next }
		inreq && /^\)/ { inreq = 0; next }
		inreq && index($1, p) == 1 { print substr($1, length(p) + 1) }
		/^require [^(]/ && index($2, p) == 1 { print substr($2, length(p) + 1) }
	' "$1/go.mod"
}

placed=" "
while [ "${#candidates[@]}" -gt 0 ]; do
	progress=0
	rest=()
	for m in "${candidates[@]}"; do
		ready=1
		for d in $(deps "$m"); do
			[[ "$placed" == *" $d "* ]] || ! grep -qx "$d" <<<"$all" || ready=0
		done
		if [ "$ready" = 1 ] && [ "$progress" = 0 ]; then
			echo "$m"
			placed+="$m "
			progress=1
		else
			rest+=("$m")
		fi
	done
	if [ "$progress" = 0 ]; then
		echo "release-modules: the requirements of ${rest[*]} form a cycle" >&2
		exit 1
	fi
	candidates=("${rest[@]}")
done
