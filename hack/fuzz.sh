#!/usr/bin/env bash
# Runs every Go fuzz target of the given packages for FUZZTIME each.
# Packages are those with a `func Fuzz` in a test file, so `go test -list`
# does not start the control planes of every envtest package just to list
# nothing; each target runs on its own, as -fuzz needs. The first failure
# stops the run with its exit code.
set -euo pipefail
fuzztime=${FUZZTIME:-10s}
pkgs=$(go list -f '{{.ImportPath}} {{.Dir}}' "${@:-./...}" | while read -r pkg dir; do
	if grep -qs '^func Fuzz' "$dir"/*_test.go; then echo "$pkg"; fi
done)
if [ -z "$pkgs" ]; then
	echo "no fuzz targets"
	exit 0
fi
# shellcheck disable=SC2086
targets=$(go test -list '^Fuzz' $pkgs | awk '/^Fuzz/ {names[++n] = $1} /^ok/ {for (i = 1; i <= n; i++) print $2, names[i]; n = 0}')
count=0
while read -r pkg target; do
	echo "fuzz: $target in $pkg for $fuzztime"
	for attempt in 1 2; do
		rc=0
		out=$(go test -run '^$' -fuzz="^${target}\$" -fuzztime="$fuzztime" "$pkg" 2>&1) || rc=$?
		echo "$out"
		[ "$rc" = 0 ] && break
		# Go's fuzzing engine sometimes ends a run with "context deadline
		# exceeded" when a worker is slow to stop on a loaded machine; a real
		# finding always writes its failing input. That case only is tried
		# once more.
		if [ "$attempt" = 1 ] && grep -q "context deadline exceeded" <<<"$out" && ! grep -q "Failing input written" <<<"$out"; then
			echo "fuzz: $target: the fuzzing engine timed out stopping, no failing input: once more"
			continue
		fi
		exit "$rc"
	done
	count=$((count + 1))
done <<<"$targets"
echo "fuzz: $count targets, no failure"
