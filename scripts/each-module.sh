#!/usr/bin/env bash
# each-module.sh COMMAND...: runs COMMAND in the folder of every module that
# go.work lists, stopping at the first that fails.
set -euo pipefail
cd "$(dirname "$0")/.."
mods=$(go work edit -json | sed -n 's/.*"DiskPath": "\.\/\(.*\)".*/\1/p')
for m in $mods; do
	echo "== $m: $*" >&2
	(cd "$m" && "$@")
done
