#!/usr/bin/env bash
# Runs every Go fuzz target of the module for FUZZTIME each (default 2s: the
# CI smoke run, under a minute for all targets; `make fuzz` runs 60s each).
#   scripts/fuzz.sh                  all targets
#   scripts/fuzz.sh FuzzLoad ...     only these
#   FUZZTIME=5m scripts/fuzz.sh      longer
#   SAVE=1 scripts/fuzz.sh           afterwards copy the inputs the fuzzer found
#                                    interesting (its cache) into the package's
#                                    testdata/fuzz/<Target>, to commit: plain
#                                    `go test` then runs them too (at most
#                                    SAVE_MAX, default 40, per target)
# A crash writes its input to testdata/fuzz/<Target>/ (commit it with the
# fix: it is then a regression test) and fails the script. The datapath
# target needs root (BPF test-run); without root it skips.
# One worker per target (-parallel 1): the machine is shared. FUZZ_JOBS
# targets (default 2) fuzz at once; each prints its lines when it is done.
set -uo pipefail
cd "$(dirname "$0")/.."
FUZZTIME=${FUZZTIME:-2s}
SAVE_MAX=${SAVE_MAX:-40}
GO=${GO:-go}
module=$($GO list -m)
cache=$($GO env GOCACHE)/fuzz

# target<TAB>package directory, from the test files.
mapfile -t all < <(grep -rHo --include='*_test.go' -E '^func (Fuzz[A-Za-z0-9_]+)\(' api cmd internal rtchan 2>/dev/null |
	sed -E 's#^(.*)/[^/]+_test\.go:func (Fuzz[A-Za-z0-9_]+)\($#\2\t\1#' | sort -u)
want=("$@")
jobs=${FUZZ_JOBS:-2}
results=$(mktemp -d)
trap 'rm -rf "$results"' EXIT

# fuzz_one fuzzes one target, prints its lines in one piece and leaves
# "$results/<Target>.failed" if it failed.
fuzz_one() {
	local target=$1 dir=$2 log rc out
	log=$(mktemp)
	# A new input is minimized for at most 2 s (the default, 60 s, leaves
	# short runs little time to fuzz).
	$GO test -run='^$' -fuzz="^${target}\$" -fuzztime="$FUZZTIME" -fuzzminimizetime=2s -parallel 1 "./$dir" >"$log" 2>&1
	rc=$?
	out="fuzz: $target ($dir) for $FUZZTIME"$'\n'
	if ((rc != 0)); then
		if grep -q 'Failing input written to' "$log"; then
			out+=$(cat "$log")$'\n'
			touch "$results/$target.failed"
		elif grep -q 'context deadline exceeded' "$log" && ! grep -q 'panic:' "$log"; then
			# The fuzzer was stopped at -fuzztime while minimizing or
			# running a new input; go test then prints "--- FAIL" with
			# "context deadline exceeded" but writes no failing input (a
			# failure the fuzzer found always writes one: the branch
			# above). Not a failure of the target.
			out+="fuzz: $target: time ran out while minimizing an input (not a failure)"$'\n'
		else
			out+=$(cat "$log")$'\n'
			touch "$results/$target.failed"
		fi
	else
		out+=$(tail -n 3 "$log" | grep -E 'execs|ok|SKIP' | tail -n 2)$'\n'
	fi
	rm -f "$log"
	if [[ "${SAVE:-}" == 1 && -d "$cache/$module/$dir/$target" ]]; then
		mkdir -p "$dir/testdata/fuzz/$target"
		local n=0 f
		while IFS= read -r f; do
			((n >= SAVE_MAX)) && break
			[[ -e "$dir/testdata/fuzz/$target/${f##*/}" ]] && continue
			cp "$f" "$dir/testdata/fuzz/$target/" && n=$((n + 1))
		done < <(ls -t "$cache/$module/$dir/$target"/*)
		out+="fuzz: $target: $(ls "$dir/testdata/fuzz/$target" | wc -l) inputs in $dir/testdata/fuzz/$target"$'\n'
	fi
	printf '%s' "$out"
}

running=0
for entry in "${all[@]}"; do
	target=${entry%%$'\t'*}
	dir=${entry#*$'\t'}
	if ((${#want[@]})) && [[ " ${want[*]} " != *" $target "* ]]; then
		continue
	fi
	if ((running >= jobs)); then
		wait -n
		running=$((running - 1))
	fi
	fuzz_one "$target" "$dir" &
	running=$((running + 1))
done
wait
failed=()
for f in "$results"/*.failed; do
	[[ -e "$f" ]] && failed+=("$(basename "$f" .failed)")
done
if ((${#failed[@]})); then
	echo "fuzz: FAILED: ${failed[*]} (the failing inputs are in testdata/fuzz/<Target>/ of their packages)" >&2
	exit 1
fi
echo "fuzz: all targets passed"
