#!/usr/bin/env bash
# make test's first phase: the compile of every package the suites test
# (hack/unit.sh), then the binaries they need: the Kubernetes binaries and
# helm3 from hack/tools beside helm, bin/fleet, bin/fleet-dev and the images
# from the main module.
#
# hack/tools compiles the main module's packages (k8s.io/api, client-go,
# apiserver, golang.org/x/..., grpc, otel, ...) at the same versions and with
# the same flags (make shared-modules checks it), so the build cache holds
# them once for both. Two go commands compiling the same package at the same
# time both compile it (the cache has no lock), so the suites' compile runs
# alone first (both cores: go runs two compiles at once); after it the two
# halves have almost nothing left in common and run side by side, each
# filling the other's idle core (links, long chains of packages).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(pwd -P)/bin # make's $(BIN)
start=$SECONDS
UNIT_COMPILE_ONLY=1 hack/unit.sh
echo "test-prepare: suites' compile done in $((SECONDS - start))s"

t=$SECONDS
(
	make --no-print-directory dev-bins "$bin/helm3"
	echo "test-prepare: dev-bins and helm3 done in $((SECONDS - t))s"
) &
tools_pid=$!
rc=0
make --no-print-directory "$bin/helm" images || rc=1
echo "test-prepare: helm and images done in $((SECONDS - t))s"
wait "$tools_pid" || rc=1
echo "test-prepare: done in $((SECONDS - start))s"
exit $rc
