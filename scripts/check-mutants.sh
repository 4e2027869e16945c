#!/usr/bin/env bash
# check-mutants.sh [NAME...]: the model checker's own regression suite.
#
# Each patch in scripts/mutants/ (NN-short-name.patch, a `git diff` of core/
# against HEAD whose first line says what promise it breaks) puts one
# realistic bug into the library. For each mutant named (NAME is a patch's
# name with or without .patch, or a unique part of it; by default every patch,
# in order), this script copies the working tree, uncommitted changes
# included, to a throwaway folder, applies the patch there (and stops loudly
# if it does not apply or core does not build), and runs the model checker
# on it as make test does, with a throwaway Redis of its own
# (scripts/with-redis.sh):
#   go test -race -short -count=1 -timeout 20m -run "$RUN" ./model/ -args -model.seed=1
# and, if that does not catch the mutant, the same without -short, as make
# check does. A run catches the mutant when the checker prints its
# `model-failure: mode=... seed=... after=... shrunk=... reproduced=k/n kind="..."`
# line, or else when one of the package's regression tests fails (mode
# "regression": the random sequences did not reach it in the budget).
# It prints one row per mutant (which budget caught it, the mode, the time
# to the first failure within that mode, the shrunk sequence's length and
# the failure's kind) and exits non-zero if any mutant was not caught.
#
# Environment:
#   BUDGETS     the budgets to try, in order (default "test check"): test is
#               make test's (-short), check make check's (without -short)
#   MODEL_ARGS  more arguments for the checker, after -args -model.seed=1
#               (e.g. MODEL_ARGS='-model.keepgoing' or '-model.duration=2m')
#   RESULTS     the folder for the logs and the table (default a new
#               ${TMPDIR:-/tmp}/slidelimit-mutants.XXXXXX, printed)
#   BASELINE=1  first run the unpatched tree under the first budget, and stop
#               if the checker fails there (a mutant caught means nothing then)
#   RUN         the -run pattern (default ., the whole package as make test
#               runs it: the checker and its regression tests; '^TestModel$'
#               for the random sequences alone, 'TestModel/concurrent' for
#               the concurrent modes alone)
#   GO          the go command (default go)
#
# The runs are one at a time: each takes a few minutes on 2 cores (-race).
# Example: scripts/check-mutants.sh 03-settle-extra denycache
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
mutants=$root/scripts/mutants
GO=${GO:-go}
BUDGETS=${BUDGETS:-test check}
MODEL_ARGS=${MODEL_ARGS:-}
BASELINE=${BASELINE:-0}
RUN=${RUN:-.}

die() {
	echo "check-mutants: $*" >&2
	exit 2
}

read -r -a budgets <<<"$BUDGETS"
[ "${#budgets[@]}" -gt 0 ] || die "BUDGETS is empty"
for b in "${budgets[@]}"; do
	case $b in
	test | check) ;;
	*) die "unknown budget '$b' in BUDGETS (test or check)" ;;
	esac
done
read -r -a model_args <<<"$MODEL_ARGS"

# The patches to run, in order.
patches=()
if [ "$#" -eq 0 ]; then
	for p in "$mutants"/*.patch; do
		[ -f "$p" ] && patches+=("$p")
	done
	[ "${#patches[@]}" -gt 0 ] || die "no patches in $mutants"
else
	for name in "$@"; do
		name=${name##*/}
		name=${name%.patch}
		if [ -f "$mutants/$name.patch" ]; then
			patches+=("$mutants/$name.patch")
			continue
		fi
		found=()
		for p in "$mutants"/*"$name"*.patch; do
			[ -f "$p" ] && found+=("$p")
		done
		case ${#found[@]} in
		1) patches+=("${found[0]}") ;;
		0) die "no mutant matches '$name' in $mutants" ;;
		*) die "'$name' matches several mutants: ${found[*]##*/}" ;;
		esac
	done
fi

if [ -n "${RESULTS:-}" ]; then
	results=$RESULTS
	mkdir -p "$results"
else
	results=$(mktemp -d "${TMPDIR:-/tmp}/slidelimit-mutants.XXXXXX")
fi
echo "check-mutants: logs and table in $results" >&2

# One copy of the tree at a time, always at the same path, so that Go's build
# cache (whose keys hold a package's folder) serves every package a patch
# leaves alone from one mutant to the next.
work=$(mktemp -d "${TMPDIR:-/tmp}/slidelimit-mutant-tree.XXXXXX")
tree=$work/tree
cleanup() {
	local status=$?
	trap - EXIT INT TERM
	chmod -R u+w "$work" 2>/dev/null || true
	rm -rf "$work"
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# prepare PATCH copies the working tree to $tree and applies PATCH ("" for
# none), then builds core.
prepare() {
	local patch=$1
	chmod -R u+w "$tree" 2>/dev/null || true
	rm -rf "$tree"
	mkdir -p "$tree"
	tar -C "$root" --exclude=./.git -cf - . | tar -C "$tree" -xf -
	if [ -n "$patch" ]; then
		# Outside any repository (the ceiling stops git from finding one
		# above the copy), git apply patches the folder it runs in.
		(cd "$tree" && GIT_CEILING_DIRECTORIES=$work git apply --check "$patch" && GIT_CEILING_DIRECTORIES=$work git apply "$patch") ||
			die "${patch##*/} does not apply to the working tree"
	fi
	(cd "$tree/core" && "$GO" build ./...) || die "core does not build with ${patch:+${patch##*/}}${patch:-no patch}"
}

# run BUDGET LOG runs the checker on $tree under BUDGET, its output to LOG,
# and prints how long it took in seconds; it fails as go test does.
run() {
	local budget=$1 log=$2 short=() start status
	[ "$budget" = test ] && short=(-short)
	start=$SECONDS
	set +e
	# shellcheck disable=SC2016 # "$GO" and "$@" are the inner bash's
	(cd "$tree" && GO=$GO scripts/with-redis.sh bash -c 'cd integration && "$GO" test -race "$@"' bash \
		"${short[@]}" -count=1 -timeout 20m -run "$RUN" ./model/ -args -model.seed=1 "${model_args[@]}") >"$log" 2>&1
	status=$?
	set -e
	echo $((SECONDS - start))
	return "$status"
}

# failure LOG prints the first model-failure line of LOG as tab-separated
# mode, after, shrunk, how many were met and kind (last: it may be empty, and
# read joins runs of tabs), or nothing.
failure() {
	local log=$1 n first parsed
	n=$(grep -c 'model-failure:' "$log" || true)
	[ "$n" -gt 0 ] || return 0
	first=$(grep -m1 'model-failure:' "$log")
	# kind is quoted as Go's %q: the quotes go, the escapes stay.
	parsed=$(sed -n 's/.*model-failure: mode=\([^ ]*\) seed=[0-9]* after=\([^ ]*\) shrunk=\([^ ]*\) reproduced=\([^ ]*\) kind="\(.*\)"[[:space:]]*$/\1\t\2\t\3 (\4)\t'"$n"'\t\5/p' <<<"$first")
	[ -n "$parsed" ] || parsed=$'?\t?\t?\t'"$n"$'\t'"${first#*model-failure: }" # a line of another format
	printf '%s\n' "$parsed"
}

if [ "$BASELINE" = 1 ]; then
	echo "== baseline: the working tree unpatched, budget ${budgets[0]}" >&2
	prepare ""
	log=$results/00-baseline.${budgets[0]}.log
	if secs=$(run "${budgets[0]}" "$log"); then
		echo "   passes (${secs}s)" >&2
	else
		echo "   FAILS without a mutant; see $log:" >&2
		grep -m5 'model-failure:\|^--- FAIL\|^FAIL' "$log" >&2 || tail -20 "$log" >&2
		exit 1
	fi
fi

rows=()
missed=0
for patch in "${patches[@]}"; do
	name=$(basename "$patch" .patch)
	echo "== $name: $(grep -m1 -v '^[[:space:]]*$' "$patch")" >&2
	prepare "$patch"
	by="NOT CAUGHT" mode=- after=- shrunk=- kind=- modes=0 wall=0
	for budget in "${budgets[@]}"; do
		log=$results/$name.$budget.log
		echo "   $budget budget: $log" >&2
		status=0
		secs=$(run "$budget" "$log") || status=$?
		wall=$((wall + secs))
		line=$(failure "$log")
		if [ -n "$line" ]; then
			IFS=$'\t' read -r mode after shrunk modes kind <<<"$line"
			by=$budget
			echo "   caught ($budget, ${secs}s): $mode after $after, shrunk to $shrunk steps, kind $kind" >&2
			break
		fi
		regress=$(grep -o '^--- FAIL: Test[A-Za-z0-9_]*' "$log" | sed 's/^--- FAIL: //' | grep -v '^TestModel$' | sort -u | tr '\n' ' ' || true)
		if [ "$status" -ne 0 ] && [ -n "$regress" ]; then
			# A regression test of the checker's package caught it, as
			# make test would: the random sequences did not.
			by=$budget mode=regression kind="caught by ${regress% } only"
			echo "   caught ($budget, ${secs}s) by a regression test only: $regress" >&2
			break
		fi
		if [ "$status" -ne 0 ]; then
			# go test failed with no model-failure line: a build error, a
			# Redis that did not start, a timeout, a test of the harness.
			by=ERROR kind="go test failed (exit $status) with no model-failure line; see $log"
			echo "   ERROR ($budget, ${secs}s): go test exit $status without a model-failure line:" >&2
			grep -m10 '^--- FAIL\|^FAIL\|panic:\|cannot\|error' "$log" >&2 || tail -20 "$log" >&2
			break
		fi
		echo "   not caught ($budget, ${secs}s)" >&2
	done
	[ "$by" = test ] || [ "$by" = check ] || missed=$((missed + 1))
	rows+=("$name"$'\t'"$by"$'\t'"$mode"$'\t'"$modes"$'\t'"$after"$'\t'"$shrunk"$'\t'"${wall}s"$'\t'"$kind")
done

table() {
	printf '%-28s %-10s %-22s %-5s %-10s %-14s %-6s %s\n' MUTANT CAUGHT-BY MODE FAILS AFTER 'SHRUNK (REPRO)' WALL KIND
	for row in "${rows[@]}"; do
		IFS=$'\t' read -r name by mode modes after shrunk wall kind <<<"$row"
		printf '%-28s %-10s %-22s %-5s %-10s %-14s %-6s %s\n' "$name" "$by" "$mode" "$modes" "$after" "$shrunk" "$wall" "$kind"
	done
}
echo
table | tee "$results/table.txt"
echo "check-mutants: $((${#rows[@]} - missed)) of ${#rows[@]} caught; logs in $results" >&2
[ "$missed" -eq 0 ]
