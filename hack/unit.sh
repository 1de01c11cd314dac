#!/usr/bin/env bash
# make test's unit and envtest suites: every test package but test/e2e (real
# clusters: make e2e), each once, without the race detector (make race runs
# it; CI runs make test RACE=1, hack/race.sh with RACE_PLAIN=1, instead of
# this script), then the slowest packages.
#
# CGO_ENABLED=0, as make build and go vet use, so the suites reuse the
# product's compiled packages from the build cache: on a fresh machine the
# dependency graph (about 1,500 packages) is compiled once for the binaries
# and the tests together. TEST_P packages at a time (default 4): the envtest
# suites first, slowest first (each control plane takes 300-500 MB and spends
# most of its time waiting), then the unit packages, whose CPU fills the
# waits. On 2 cores 4 at a time took 390-411 s, 3 at a time 455 s (the cores
# were a fifth idle in the tail).
#
# Usage: hack/unit.sh [go test flags]; FLEET_BIN_DIR names the control-plane
# binaries, as for make test. UNIT_COMPILE_ONLY=1 only compiles the packages
# the run tests (hack/test-prepare.sh does it before the builds of the
# binaries).
set -euo pipefail
cd "$(dirname "$0")/.."
export CGO_ENABLED=0
source hack/packages.sh
source hack/testflags.sh

if [[ ${UNIT_COMPILE_ONLY:-} == 1 ]]; then
	# Compile (no link, no run) into the build cache. Errors are left to the
	# run itself to report, where they name the test package.
	go list -export -deps -test "${envtest[@]}" "${unit[@]}" >/dev/null 2>&1 || true
	exit 0
fi

# The log stays in bin/, not /tmp: something in a long run (not found yet)
# has removed files from /tmp under it.
mkdir -p bin && log=$(mktemp bin/.unit-log.XXXXXX)
trap 'rm -f "$log"' EXIT
start=$SECONDS
rc=0
echo "unit: ${#envtest[@]} envtest suites and ${#unit[@]} unit packages, ${TEST_P:-4} at a time (the race detector: make race)"
go test -p "${TEST_P:-4}" "$@" "${envtest[@]}" "${unit[@]}" 2>&1 | tee "$log" || rc=1
echo "unit: slowest packages (s)"
# The last awk reads all its input: head would close the pipe early, and
# under pipefail sort's SIGPIPE would fail the run after every test passed.
grep -E '^(ok|FAIL)\s' "$log" | awk '$NF ~ /s$/ {t=$NF; sub(/s$/, "", t); print t, $1, $2}' | sort -rn |
	awk 'NR <= 15 {printf "  %7.1f %-4s %s\n", $1, $2, $3}'
echo "unit: done in $((SECONDS - start))s"
exit $rc
