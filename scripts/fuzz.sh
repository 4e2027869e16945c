#!/usr/bin/env bash
# fuzz.sh: runs every fuzz target of every module for FUZZTIME each (100000x,
# that is 100,000 inputs, by default), beyond its seed corpus, which the plain
# test run already covers. The budget is a count, not a duration: with a
# duration, Go's fuzz coordinator up to go1.26 can report "context deadline
# exceeded" as a failure when the time ends while a starved worker is busy
# (golang/go#75804), with no failing input. A count has no such deadline.
# A failure leaves the input that caused it in the package's
# testdata/fuzz/<Target>/, where the next go test run replays it.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-100000x}
mods=$("$GO" work edit -json | sed -n 's/.*"DiskPath": "\.\/\(.*\)".*/\1/p')
for m in $mods; do
	# Each package folder of the module with a fuzz target, and its targets.
	dirs=$(grep -rlE '^func Fuzz[A-Za-z0-9_]*\(f \*testing\.F\)' --include='*_test.go' "$m" | xargs -r -n1 dirname | sort -u || true)
	for dir in $dirs; do
		for target in $(grep -hoE '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go | sed 's/^func //' | sort -u); do
			echo "== fuzz $dir $target for $FUZZTIME" >&2
			(cd "$dir" && "$GO" test -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" .)
		done
	done
done
