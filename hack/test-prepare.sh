#!/usr/bin/env bash
# make test's first phase: the binaries the suites need (the Kubernetes
# binaries from hack/tools, the helm CLIs, bin/fleet, bin/fleet-dev and the
# images), and beside them the race detector's compile of every package
# hack/race.sh tests with it. The two share no compiled package (hack/tools
# pins its own module versions, and -race builds differ from the product's
# CGO_ENABLED=0 ones), so neither waits for the other, and the compile fills
# the cores the builds leave idle (links, module downloads, the long chains
# of packages that depend on each other). Without it the race run starts by
# compiling about 1,500 packages while envtest suites wait.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
(
	RACE_COMPILE_ONLY=1 hack/race.sh
	echo "test-prepare: race detector's compile done in $((SECONDS - start))s"
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
