#!/usr/bin/env bash
# Runs the unit and envtest suites (not test/e2e: real clusters, make e2e),
# each once, then prints the slowest packages. Two go test runs side by side:
#
#  - with the race detector, RACE_P packages at a time (default 3): the
#    envtest suites (packages whose tests import dev/testenv or
#    dev/controlplane, so start control planes), slowest first, then the
#    unit packages. An envtest suite spends most of its time waiting for its
#    controllers and API servers (controller/registration takes the same
#    time with and without the race detector), so the unit packages' CPU
#    fills the gaps; each control plane takes 300-500 MB;
#  - without it, NORACE_P at a time (default 1): the envtest suites listed
#    in norace below, then the assertions the race detector cannot make
#    (norace_run).
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
# binaries, as for make test. RACE_LIST=1 prints which package runs how;
# RACE_COMPILE_ONLY=1 only compiles the race run's packages.
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
# out-of-memory cases under it. The run without it runs them.
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

if [[ ${RACE_COMPILE_ONLY:-} == 1 ]]; then
	# Compile (no link, no run) every package the race run tests, with the
	# race detector, into the build cache: hack/test-prepare.sh does it
	# beside the builds of the binaries the suites need. Its errors are left
	# to the run itself to report, where they name the test package.
	CGO_ENABLED=1 go list -race -export -deps -test "${envtest[@]}" "${unit[@]}" >/dev/null 2>&1 || true
	exit 0
fi

log=$(mktemp) plainlog=$(mktemp)
trap 'rm -f "$log" "$plainlog"' EXIT
start=$SECONDS
rc=0
race_p=${RACE_P:-3} norace_p=${NORACE_P:-1}

# Beside the race run, the suites without the race detector (started first:
# both compile at once, then both mostly wait). -race needs cgo; the run
# without it uses CGO_ENABLED=0, as make build and go vet do, so it reuses
# their packages from the build cache.
(
	r=0
	CGO_ENABLED=0 go test -p "$norace_p" "$@" "${plain[@]}" >"$plainlog" 2>&1 || r=1
	CGO_ENABLED=0 go test -run "$run_re" "$@" "${run_pkgs[@]}" >>"$plainlog" 2>&1 || r=1
	echo "race: without the race detector: done in $((SECONDS - start))s" >>"$plainlog"
	exit $r
) &
plain_pid=$!
echo "race: ${#envtest[@]} envtest suites and ${#unit[@]} unit packages with the race detector, $race_p at a time;" \
	"beside them ${#plain[@]} envtest suites and ${#run_tests[@]} tests without it, $norace_p at a time"
CGO_ENABLED=1 go test -race -p "$race_p" "$@" "${envtest[@]}" "${unit[@]}" 2>&1 | tee "$log" || rc=1
echo "race: with the race detector: done in $((SECONDS - start))s"
wait "$plain_pid" || rc=1
echo "race: without the race detector:"
cat "$plainlog"
echo "race: slowest packages (s)"
cat "$log" "$plainlog" | grep -E '^(ok|FAIL)\s' | awk '$NF ~ /s$/ {t=$NF; sub(/s$/, "", t); print t, $1, $2}' | sort -rn | head -15 |
	awk '{printf "  %7.1f %-4s %s\n", $1, $2, $3}'
echo "race: done in $((SECONDS - start))s"
exit $rc
