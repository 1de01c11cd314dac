#!/usr/bin/env bash
# Runs the unit and envtest suites (not test/e2e: real clusters, make e2e),
# each once, in three timed phases, then prints the slowest packages:
#
#  1. unit packages, with the race detector, in parallel (as go test does);
#  2. envtest suites (packages whose tests import dev/testenv or
#     dev/controlplane, so start control planes) with the race detector,
#     RACE_ENVTEST_P at a time (default 3: a suite spends most of its time
#     waiting for its controllers and API servers, so three keep two cores
#     busy; each control plane takes 300-500 MB);
#  3. the envtest suites listed in norace below without the race detector,
#     NORACE_ENVTEST_P at a time (default 3), with the assertions the race
#     detector cannot make (see norace_run).
#
# The rule: the race detector runs wherever a race can be: every unit
# package, and every envtest suite whose package's own code has goroutines
# or state shared between them (mutexes, atomics, caches, servers), and the
# suites that drive the cluster-access wing end to end. A suite runs without
# it (2-4x less CPU) only when its package's code has neither, so the race
# detector would watch controller-runtime and the API server rather than
# fleet: reconcilers without shared state, CLI commands, the wiring. A new
# envtest suite runs with the race detector until it is added to norace.
#
# Usage: hack/race.sh [go test flags]; FLEET_BIN_DIR names the control-plane
# binaries, as for make test. RACE_LIST=1 prints which package runs how.
set -euo pipefail
cd "$(dirname "$0")/.."

module=$(go list -m)

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
	# CLI commands: one goroutine, requests in sequence.
	internal/uninstall
	review
	# Registers types in a scheme at init.
	internal/scheme
)

# Assertions the race detector cannot make: a race-enabled render worker's
# shadow memory counts against its RLIMIT_AS, so these tests skip their
# out-of-memory cases under it. Phase 3 runs them without it.
norace_run=(
	"internal/renderworker:TestPool_RunawayTemplatesAreStoppedWithAClearError"
	"internal/renderservice:TestRenderer_HostileBundlesFailWithTheBundlesReasonWithinTheControllersLimits"
)

# The slowest suites start first, so the last ones to finish are short.
slowest_first=(controller/registration agent agent/deployer cmd/fleet controller/rollout controller/cluster test/access proxy)

unit=() suites=()
while read -r pkg imports; do
	case $pkg in
	"$module/test/e2e") continue ;;
	esac
	case " $imports " in
	*" $module/dev/testenv "* | *" $module/dev/controlplane "*) suites+=("${pkg#"$module"/}") ;;
	*) unit+=("${pkg#"$module"/}") ;;
	esac
done < <(go list -f '{{.ImportPath}} {{join .TestImports " "}} {{join .XTestImports " "}}' ./...)

# A package named above that is gone or no longer an envtest suite is a
# mistake in this file, not something to skip silently.
listed() { [[ " ${*:2} " == *" $1 "* ]]; }
for p in "${norace[@]}" "${slowest_first[@]}"; do
	listed "$p" "${suites[@]}" || { echo "hack/race.sh: $p is named in hack/race.sh but is not an envtest suite" >&2; exit 2; }
done
envtest=() plain=()
for p in "${slowest_first[@]}" "${suites[@]}"; do
	if listed "$p" "${norace[@]}"; then
		listed "./$p" "${plain[@]}" || plain+=("./$p")
	elif ! listed "./$p" "${envtest[@]}"; then
		envtest+=("./$p")
	fi
done
run_pkgs=() run_tests=()
for e in "${norace_run[@]}"; do
	listed "${e%%:*}" "${unit[@]}" "${suites[@]}" || { echo "hack/race.sh: ${e%%:*} in norace_run is not a test package" >&2; exit 2; }
	run_pkgs+=("./${e%%:*}") run_tests+=("${e#*:}")
done
unit=("${unit[@]/#/./}")
run_re="^($(IFS='|'; echo "${run_tests[*]}"))\$"
if [[ ${RACE_LIST:-} == 1 ]]; then # print the plan only
	printf 'unit, race: %s\nenvtest, race: %s\nenvtest, no race: %s\nno race, -run %s: %s\n' \
		"${unit[*]}" "${envtest[*]}" "${plain[*]}" "$run_re" "${run_pkgs[*]}"
	exit 0
fi

log=$(mktemp)
start=$SECONDS
rc=0
phase() {
	local name=$1 t=$SECONDS
	shift
	echo "race: $name"
	"$@" 2>&1 | tee -a "$log" || rc=1
	printf 'race: phase %-58s %5ds\n' "$name" $((SECONDS - t)) | tee -a "$log.phases"
}
: >"$log.phases"
trap 'rm -f "$log" "$log.phases"' EXIT

# -race needs cgo; the runs without it use CGO_ENABLED=0, as make build and
# go vet do, so they reuse those packages from the build cache.
phase "1/3 ${#unit[@]} unit packages, race" \
	env CGO_ENABLED=1 go test -race "$@" "${unit[@]}"
phase "2/3 ${#envtest[@]} envtest suites, race, ${RACE_ENVTEST_P:-3} at a time" \
	env CGO_ENABLED=1 go test -race -p "${RACE_ENVTEST_P:-3}" "$@" "${envtest[@]}"
# shellcheck disable=SC2317 # run by phase
plain_phase() {
	local r=0
	CGO_ENABLED=0 go test -p "${NORACE_ENVTEST_P:-3}" "$@" "${plain[@]}" || r=1
	CGO_ENABLED=0 go test -run "$run_re" "$@" "${run_pkgs[@]}" || r=1
	return $r
}
phase "3/3 ${#plain[@]} envtest suites and ${#run_tests[@]} tests, no race, ${NORACE_ENVTEST_P:-3} at a time" \
	plain_phase "$@"
echo "race: phases"
cat "$log.phases"
echo "race: slowest packages (s)"
grep -E '^(ok|FAIL)\s' "$log" | awk '$NF ~ /s$/ {t=$NF; sub(/s$/, "", t); print t, $1, $2}' | sort -rn | head -15 |
	awk '{printf "  %7.1f %-4s %s\n", $1, $2, $3}'
echo "race: done in $((SECONDS - start))s"
exit $rc
