#!/usr/bin/env bash
# make race: the unit and envtest suites with the race detector (make test
# runs every suite without it; CI runs both). Packages are classified by
# hack/packages.sh; RACE_P at a time (default 3), the envtest suites slowest
# first, then the unit packages. An envtest suite spends most of its time
# waiting for its controllers and API servers, so the unit packages' CPU
# fills the gaps; each control plane takes 300-500 MB.
#
# The rule: the race detector runs wherever a race can be: every unit
# package, and every envtest suite whose package's own code has goroutines
# or state shared between them (mutexes, atomics, caches, servers), and the
# suites that drive the cluster-access wing end to end. It skips a suite
# (listed in norace below, with why) only when its package's code has
# neither, so the race detector would watch controller-runtime and the API
# server rather than fleet: reconcilers without shared state, CLI commands,
# the wiring, or CLI commands whose tests only build the long-running ones.
# A new envtest suite runs with the race detector until it is added to
# norace. Single tests that only move volume through one goroutine are
# skipped under it (raceskip below, each with why). Tests that assert memory
# limits skip themselves under the race detector (its shadow memory counts
# against RLIMIT_AS); make test runs them.
#
# Usage: hack/race.sh [go test flags]; FLEET_BIN_DIR names the control-plane
# binaries, as for make test. RACE_LIST=1 prints which package runs how.
set -euo pipefail
cd "$(dirname "$0")/.."

source hack/packages.sh
source hack/testflags.sh

# Envtest suites run without the race detector, each with why no race of
# fleet's can happen in it.
norace=(
	# The wiring of every controller into one manager; the packages it wires
	# are race-tested in their own suites. Its hostile-Bundle test asserts the
	# render memory limit only without the race detector (shadow memory).
	controller
	# Reconcilers with no state outside one Reconcile call.
	controller/bootstrap
	controller/capi
	controller/token
	# CLI commands: one goroutine, requests in sequence. cmd/fleet also wires
	# the long-running commands, but its tests only build them (flags,
	# logging, exit codes); the packages they wire are race-tested in their
	# own suites.
	cmd/fleet
	internal/uninstall
	review
	# Registers types in a scheme at init.
	internal/scheme
	# The API server's handling of the GitRepo CRDs; no code of fleet's runs.
	test/gitrepoapi
)

# Tests skipped under the race detector (make test runs them), each with why
# it adds no concurrency of fleet's that the rest of its suite does not run.
# The race detector multiplies the cost of every memory access, and these
# move megabytes through one goroutine: under it they took 284 s of the agent
# suite's 798 s, alone on an idle machine 186 s and 98 s.
raceskip=(
	# Content of 1.8 MB gzipped in chunks: compression, hashing, and the
	# chunks' Secrets; the chunk reader is race-tested in internal/bundlecontents.
	TestBundle_LargeContentTravelsInVerifiedChunks
	# The same for a Bundle's large input (BundleContents objects).
	TestBundle_LargeInputTravelsAsVerifiedContents
)
for t in "${raceskip[@]}"; do
	grep -rqs --include='*_test.go' "^func $t(t \*testing.T)" . || { echo "hack/race.sh: $t is named in raceskip but no test has that name" >&2; exit 2; }
done
skip="^($(IFS='|'; echo "${raceskip[*]}"))\$"

for p in "${norace[@]}"; do
	listed "./$p" "${envtest[@]}" || { echo "hack/race.sh: $p is named in norace but is not an envtest suite" >&2; exit 2; }
done
race=() skipped=()
for p in "${envtest[@]}"; do
	if listed "${p#./}" "${norace[@]}"; then skipped+=("$p"); else race+=("$p"); fi
done

if [[ ${RACE_LIST:-} == 1 ]]; then # print the plan only
	printf 'unit, race: %s\nenvtest, race: %s\nenvtest, skipped (make test runs them): %s\ntests skipped: %s\n' \
		"${unit[*]}" "${race[*]}" "${skipped[*]}" "$skip"
	exit 0
fi

export CGO_ENABLED=1 # -race needs cgo
mkdir -p bin && log=$(mktemp bin/.race-log.XXXXXX) # in bin/, as hack/unit.sh says why
trap 'rm -f "$log"' EXIT
start=$SECONDS
rc=0
echo "race: ${#race[@]} envtest suites and ${#unit[@]} unit packages with the race detector, ${RACE_P:-3} at a time"
go test -race -p "${RACE_P:-3}" -skip "$skip" "$@" "${race[@]}" "${unit[@]}" 2>&1 | tee "$log" || rc=1
echo "race: slowest packages (s)"
# The last awk reads all its input: head would close the pipe early, and
# under pipefail sort's SIGPIPE would fail the run after every test passed.
grep -E '^(ok|FAIL)\s' "$log" | awk '$NF ~ /s$/ {t=$NF; sub(/s$/, "", t); print t, $1, $2}' | sort -rn |
	awk 'NR <= 15 {printf "  %7.1f %-4s %s\n", $1, $2, $3}'
echo "race: done in $((SECONDS - start))s"
exit $rc
