#!/usr/bin/env bash
# make test's suites: the unit and envtest suites (hack/unit.sh) and, side
# by side with them, the e2e suite on real local clusters. Both halves spend most of their time waiting (for
# controllers, API servers, kubelets, pods), so on a 2-core machine each
# fills the other's waits: together they take little more than the longer
# one. Every bounded wait in them is written for a loaded machine.
#
# The e2e suite's output is printed when it ends (go test prints a package's
# output at its end anyway). Usage: hack/suites.sh [go test flags], with
# FLEET_BIN_DIR and PATH as make test sets them.
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/testflags.sh

mkdir -p bin && e2elog=$(mktemp bin/.e2e-log.XXXXXX) # in bin/, as hack/unit.sh says why
trap 'rm -f "$e2elog"' EXIT
start=$SECONDS
(
	r=0
	FLEET_E2E=1 go test "$@" ./test/e2e/ >"$e2elog" 2>&1 || r=1
	echo "suites: e2e suite done in $((SECONDS - start))s" >>"$e2elog"
	exit $r
) &
e2e_pid=$!
echo "suites: the e2e suite runs beside the unit and envtest suites (its output follows when it ends)"

rc=0
hack/unit.sh "$@" || rc=1
echo "suites: unit and envtest suites done in $((SECONDS - start))s"
echo "suites: waiting for the e2e suite"
wait "$e2e_pid" || rc=1
echo "suites: e2e suite output:"
cat "$e2elog"
echo "suites: done in $((SECONDS - start))s"
exit $rc
