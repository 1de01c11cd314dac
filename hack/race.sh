#!/usr/bin/env bash
# make race: the unit and envtest suites with the race detector (make test
# runs every suite without it; CI runs make test RACE=1: this script with
# RACE_PLAIN=1, below). Packages are classified by
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
# RACE_PLAIN=1 (make test RACE=1, which CI runs) also runs, beside the race
# run and without the race detector, everything the race run leaves out: the
# norace suites, the raceskip tests and the racelimits tests. Every test then
# runs once, each where it proves most, and no suite runs twice.
#
# Usage: hack/race.sh [go test flags]; FLEET_BIN_DIR names the control-plane
# binaries, as for make test. RACE_LIST=1 prints which package runs how;
# RACE_COMPILE_ONLY=1 only compiles (below).
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
	# The agent's side of it: 2.8 MB of manifests read from their chunks,
	# decoded and applied by one worker. The deployer's Secret watch and
	# content reads are race-tested with inline content in the same suite.
	# Under the race detector, beside make e2e (CI), it once took over a
	# minute to apply after its last chunk arrived.
	TestDeployer_ChunkedContentWaitsForItsChunksAndRefusesAChangedOne
)
# Tests with cases that skip themselves under the race detector (their
# package's raceDetector constant): memory limits enforced with RLIMIT_AS,
# which the race detector's shadow memory counts against. A test that reads
# raceDetector and is not named here fails this script, so none is left out
# of make test RACE=1's plain run.
racelimits=(
	TestPool_RunawayTemplatesAreStoppedWithAClearError
	TestPool_RunawayValuesTemplatesStopAtTheWorkersLimits
	TestRenderer_HostileBundlesFailWithTheBundlesReasonWithinTheControllersLimits
)
for t in "${raceskip[@]}" "${racelimits[@]}"; do
	grep -rqs --include='*_test.go' "^func $t(t \*testing.T)" . || { echo "hack/race.sh: $t is named in raceskip or racelimits but no test has that name" >&2; exit 2; }
done
skip="^($(IFS='|'; echo "${raceskip[*]}"))\$"
plainrun="^($(IFS='|'; echo "${raceskip[*]}|${racelimits[*]}"))\$"

for p in "${norace[@]}"; do
	listed "./$p" "${envtest[@]}" || { echo "hack/race.sh: $p is named in norace but is not an envtest suite" >&2; exit 2; }
done
race=() skipped=()
for p in "${envtest[@]}"; do
	if listed "${p#./}" "${norace[@]}"; then skipped+=("$p"); else race+=("$p"); fi
done
# The race-tested packages whose tests read raceDetector, and those tests.
readers=()
while read -r file fn; do
	pkg=./$(dirname "${file#./}")
	listed "$pkg" "${skipped[@]}" && continue
	listed "$fn" "${racelimits[@]}" || { echo "hack/race.sh: $fn ($file) reads raceDetector but is not named in racelimits: make test RACE=1 would run its skipped cases nowhere" >&2; exit 2; }
	listed "$pkg" "${readers[@]}" || readers+=("$pkg")
done < <(grep -rl --include='*_test.go' raceDetector . | while read -r f; do
	awk -v f="$f" '/^func /{fn=$2; sub(/\(.*/, "", fn)} /raceDetector/ && !/^(const|\/\/)/ {print f, fn}' "$f"
done | sort -u)
# The packages that hold the raceskip tests.
while read -r file; do
	pkg=./$(dirname "${file#./}")
	listed "$pkg" "${readers[@]}" || readers+=("$pkg")
done < <(for t in "${raceskip[@]}"; do grep -rl --include='*_test.go' "^func $t(t \*testing.T)" .; done | sort -u)

if [[ ${RACE_LIST:-} == 1 ]]; then # print the plan only
	printf 'unit, race: %s\nenvtest, race: %s\nenvtest, without it (make test; make test RACE=1 beside the race run): %s\ntests skipped or with cases skipped under it: %s in %s\n' \
		"${unit[*]}" "${race[*]}" "${skipped[*]}" "$plainrun" "${readers[*]}"
	exit 0
fi

if [[ ${RACE_COMPILE_ONLY:-} == 1 ]]; then
	# Compile (no link, no run) into the build cache, as hack/unit.sh does:
	# RACE_PLAIN=1's packages without the race detector, or the race-tested
	# ones with it (RACE_COMPILE_ONLY_RACE=1). hack/test-prepare.sh runs the
	# first before the build of the control plane, which compiles many of the
	# same packages, and the second beside it: they share none.
	if [[ ${RACE_COMPILE_ONLY_RACE:-} == 1 ]]; then
		CGO_ENABLED=1 go list -race -export -deps -test "${race[@]}" "${unit[@]}" >/dev/null 2>&1 || true
	else
		CGO_ENABLED=0 go list -export -deps -test "${skipped[@]}" "${readers[@]}" >/dev/null 2>&1 || true
	fi
	exit 0
fi

mkdir -p bin && log=$(mktemp bin/.race-log.XXXXXX) plainlog=$(mktemp bin/.race-plain-log.XXXXXX) # in bin/, as hack/unit.sh says why
trap 'rm -f "$log" "$plainlog"' EXIT
start=$SECONDS
rc=0 plain_pid=
if [[ ${RACE_PLAIN:-} == 1 ]]; then
	# Mostly envtest suites waiting for their control planes: beside the
	# race run, they fill its waits. Their output follows the race run's.
	echo "race: beside the race run, without it: ${#skipped[@]} envtest suites, and $plainrun in ${readers[*]}, ${PLAIN_P:-2} at a time"
	(
		export CGO_ENABLED=0 # as make test: the product's compiled packages
		prc=0
		go test -p "${PLAIN_P:-2}" "$@" "${skipped[@]}" >"$plainlog" 2>&1 || prc=1
		go test -p "${PLAIN_P:-2}" -run "$plainrun" "$@" "${readers[@]}" >>"$plainlog" 2>&1 || prc=1
		exit $prc
	) &
	plain_pid=$!
fi
export CGO_ENABLED=1 # -race needs cgo
echo "race: ${#race[@]} envtest suites and ${#unit[@]} unit packages with the race detector, ${RACE_P:-3} at a time"
go test -race -p "${RACE_P:-3}" -skip "$skip" "$@" "${race[@]}" "${unit[@]}" 2>&1 | tee "$log" || rc=1
if [[ -n $plain_pid ]]; then
	wait "$plain_pid" || rc=1
	echo "race: the run without the race detector:"
	cat "$plainlog"
	cat "$plainlog" >>"$log"
fi
echo "race: slowest packages (s)"
# The last awk reads all its input: head would close the pipe early, and
# under pipefail sort's SIGPIPE would fail the run after every test passed.
grep -E '^(ok|FAIL)\s' "$log" | awk '$NF ~ /s$/ {t=$NF; sub(/s$/, "", t); print t, $1, $2}' | sort -rn |
	awk 'NR <= 15 {printf "  %7.1f %-4s %s\n", $1, $2, $3}'
echo "race: done in $((SECONDS - start))s"
exit $rc
