# Sourced by hack/unit.sh and hack/race.sh: which packages are test suites of
# which kind. Sets, relative to the module ("./controller", ...):
#
#   envtest  the envtest suites (packages whose tests import dev/testenv or
#            dev/controlplane, so start control planes), slowest first
#   unit     every other test package but test/e2e (real clusters: make e2e)
#   norace   the envtest suites the race detector skips (hack/race.sh says why)
#
# A package named in slowest_first or norace that is gone or no longer an
# envtest suite is a mistake in these files, not something to skip silently.

module=$(go list -m)

# The slowest suites start first, so the last ones to finish are short.
slowest_first=(controller/registration agent cmd/fleet agent/deployer controller/rollout controller/cluster controller test/access proxy)

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

listed() { [[ " ${*:2} " == *" $1 "* ]]; }
for p in "${slowest_first[@]}"; do
	listed "$p" "${suites[@]}" || { echo "hack/packages.sh: $p is named in slowest_first but is not an envtest suite" >&2; exit 2; }
done
envtest=()
for p in "${slowest_first[@]}" "${suites[@]}"; do
	listed "./$p" "${envtest[@]}" || envtest+=("./$p")
done
unit=("${unit[@]/#/./}")
