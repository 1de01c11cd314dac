#!/usr/bin/env bash
# Runs every Go fuzz target of the given packages for FUZZTIME each.
# Targets are the `func FuzzX(<name> *testing.F)` of the packages' test files,
# read from the source: `go test -list` would link every test binary (and
# start an envtest package's control planes in its TestMain) just to list
# them. Each target runs on its own, as -fuzz needs. The first failure stops
# the run with its exit code; a failing input is written to the package's
# testdata/fuzz, as go test writes it.
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/testflags.sh
fuzztime=${FUZZTIME:-10s}
targets=$(go list -f '{{.ImportPath}} {{.Dir}}' "${@:-./...}" | while read -r pkg dir; do
	sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)([A-Za-z0-9_]* \*testing\.F).*/\1/p' "$dir"/*_test.go 2>/dev/null | sort -u | while read -r name; do
		echo "$pkg $name"
	done
done)
if [ -z "$targets" ]; then
	echo "no fuzz targets"
	exit 0
fi
# One instrumented test binary per package (go test -c -fuzz), run once per
# target from the package's directory (seed corpora in testdata/fuzz), with
# the corpus cache go test itself uses: a package's targets then cost one
# link, not one each.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cache=$(go env GOCACHE)/fuzz
count=0 built=
while read -r pkg target; do
	bin=$work/$(tr / _ <<<"$pkg").test
	if [[ $built != "$pkg" ]]; then
		go test -c -fuzz=. -o "$bin" "$pkg"
		built=$pkg
	fi
	dir=$(go list -f '{{.Dir}}' "$pkg")
	echo "fuzz: $target in $pkg for $fuzztime"
	for attempt in 1 2; do
		rc=0
		out=$(cd "$dir" && "$bin" -test.run='^$' -test.fuzz="^${target}\$" -test.fuzztime="$fuzztime" \
			-test.fuzzcachedir="$cache/$pkg" -test.paniconexit0 -test.timeout=10m 2>&1) || rc=$?
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
