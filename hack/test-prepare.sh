#!/usr/bin/env bash
# make test's first phase: the binaries the suites need (the Kubernetes
# binaries from hack/tools, the helm CLIs, bin/fleet, bin/fleet-dev and the
# images), and beside them the compile of every package the suites test
# (hack/unit.sh). hack/tools pins its own module versions, so the
# Kubernetes binaries share no compiled package with the suites: the compile
# fills the cores their build leaves idle (links, module downloads, the long
# chains of packages that depend on each other), and by the time the helm
# CLI and bin/fleet are built (the same CGO_ENABLED=0 packages) most of
# their graph is in the build cache.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
(
	UNIT_COMPILE_ONLY=1 hack/unit.sh
	echo "test-prepare: suites' compile done in $((SECONDS - start))s"
) &
compile_pid=$!
rc=0
for target in dev-bins helm images; do
	t=$SECONDS
	make --no-print-directory "$target" || { rc=1; break; }
	echo "test-prepare: $target done in $((SECONDS - t))s"
done
wait "$compile_pid" || rc=1
echo "test-prepare: done in $((SECONDS - start))s"
exit $rc
