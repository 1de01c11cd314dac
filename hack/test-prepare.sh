#!/usr/bin/env bash
# make test's first phase: the compile of every package the suites test
# (hack/unit.sh), then what they run: the control plane, kubectl and helm3
# from hack/tools ($TEST_TOOLS, one go build) beside bin/helm from the main
# module.
#
# hack/tools compiles the main module's packages (k8s.io/api, client-go,
# apiserver, golang.org/x/..., grpc, otel, ...) at the same versions and with
# the same flags (make shared-modules checks it), so the build cache holds
# them once for both. Two go commands compiling the same package at the same
# time both compile it (the cache has no lock), so the suites' compile runs
# alone first (both cores: go runs two compiles at once); after it the two
# builds have almost nothing left in common and run side by side.
#
# TEST_RACE=1 (make test RACE=1): the packages hack/race.sh runs without the
# race detector are compiled first, alone, and the race-tested ones (with
# it: nothing in common with the other builds) beside the two builds.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(pwd -P)/bin # make's $(BIN)
start=$SECONDS
race_pid=
if [[ ${TEST_RACE:-} == 1 ]]; then
	RACE_PLAIN=1 RACE_COMPILE_ONLY=1 hack/race.sh
	echo "test-prepare: the compile of the suites run without the race detector done in $((SECONDS - start))s"
	(
		RACE_COMPILE_ONLY=1 RACE_COMPILE_ONLY_RACE=1 hack/race.sh
		echo "test-prepare: the compile of the race-tested suites done in $((SECONDS - start))s"
	) &
	race_pid=$!
else
	UNIT_COMPILE_ONLY=1 hack/unit.sh
	echo "test-prepare: suites' compile done in $((SECONDS - start))s"
fi

t=$SECONDS
# shellcheck disable=SC2086 # a list of names
(
	hack/build-tools.sh ${TEST_TOOLS:?TEST_TOOLS names the hack/tools binaries to build (make test sets it)}
	echo "test-prepare: ${TEST_TOOLS} done in $((SECONDS - t))s"
) &
tools_pid=$!
rc=0
make --no-print-directory "$bin/helm" || rc=1
echo "test-prepare: helm done in $((SECONDS - t))s"
wait "$tools_pid" || rc=1
[[ -z $race_pid ]] || wait "$race_pid" || rc=1
echo "test-prepare: done in $((SECONDS - start))s"
exit $rc
