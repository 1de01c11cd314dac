#!/usr/bin/env bash
# Runs the tests with the race detector: first the unit packages (in
# parallel, as go test does), then the envtest suites (packages whose tests
# import dev/testenv or dev/controlplane, so start control planes)
# one package at a time: under the race detector they need several times
# the CPU, and their bounded waits must hold on a loaded 2-core machine.
# test/e2e is left out: it runs real clusters (make e2e).
#
# Usage: hack/race.sh [go test flags]; FLEET_BIN_DIR names the control-plane
# binaries, as for make test.
set -euo pipefail
cd "$(dirname "$0")/.."
export CGO_ENABLED=1 # -race needs cgo

module=$(go list -m)
unit=() envtest=()
while read -r pkg imports; do
	case $pkg in
	"$module/test/e2e") continue ;;
	esac
	case " $imports " in
	*" $module/dev/testenv "* | *" $module/dev/controlplane "*) envtest+=("$pkg") ;;
	*) unit+=("$pkg") ;;
	esac
done < <(go list -f '{{.ImportPath}} {{join .TestImports " "}} {{join .XTestImports " "}}' ./...)

start=$SECONDS
rc=0
echo "race: ${#unit[@]} unit packages"
go test -race "$@" "${unit[@]}" || rc=1
echo "race: ${#envtest[@]} envtest suites, one at a time"
go test -race -p 1 "$@" "${envtest[@]}" || rc=1
echo "race: done in $((SECONDS - start))s"
exit $rc
