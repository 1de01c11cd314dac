#!/usr/bin/env bash
# The import rules of docs/architecture.md ("Layering"), checked on the
# non-test dependency graph of every package of the module. A violation is
# printed as the shortest import chain from a package of ours to the package
# it must not reach.
set -euo pipefail
cd "$(dirname "$0")/.."

module=$(go list -m)
m=${module//./\\.}
# One line per package reachable from the module (not counting tests):
# the package, then what it imports.
graph=$(go list -deps -f '{{.ImportPath}}{{range .Imports}} {{.}}{{end}}' ./...)

# chains ROOTS EXCEPT BAD OPAQUE prints, for every package matching the
# regular expression ROOTS and not EXCEPT, the shortest import chain to a
# package matching BAD, if any, not looking into packages matching OPAQUE.
chains() {
	awk -v roots="$1" -v except="$2" -v bad="$3" -v opaque="$4" '
	{ adj[$1] = $0; pkgs[NR] = $1 }
	END {
		for (i = 1; i <= NR; i++) {
			r = pkgs[i]
			if (r !~ roots || (except != "" && r ~ except)) continue
			split("", parent); split("", seen); split("", q)
			head = 1; tail = 1; q[1] = r; seen[r] = 1; found = ""
			while (head <= tail && found == "") {
				p = q[head++]
				n = split(adj[p], f, " ")
				for (j = 2; j <= n; j++) {
					d = f[j]
					if (d in seen) continue
					seen[d] = 1; parent[d] = p
					if (d ~ bad) { found = d; break }
					if (opaque == "" || d !~ opaque) q[++tail] = d
				}
			}
			if (found == "") continue
			chain = found
			for (x = found; x != r; ) { x = parent[x]; chain = x " -> " chain }
			print "  " chain
		}
	}' <<<"$graph"
}

failed=0
# rule NAME ROOTS EXCEPT BAD OPAQUE WHY
rule() {
	local out
	out=$(chains "$2" "$3" "$4" "$5")
	if [[ -n $out ]]; then
		echo "layering: $1: $6"
		echo "$out"
		failed=1
	fi
}

# Test helpers: packages only tests import (renderer/renderertest,
# charts/chartstest, dev/testenv).
helpers="^$m/(.*/)?([a-z0-9]*test|testenv)\$"

# Forbidden: the Helm SDK and kustomize's build engine (kustomize/api, the
# kustomize CLI). Allowed: kustomize's YAML library (sigs.k8s.io/kustomize/
# kyaml), which fluxcd/cli-utils and the Kubernetes client tooling use.
# Not looked into: k8s.io/cli-runtime/pkg/resource, kubectl's resource
# builder, which links kustomize/api for `kubectl apply -k`; fluxcd/pkg/ssa
# (the one apply path, internal/apply) reaches it through
# fluxcd/cli-utils/pkg/object and never builds a kustomization with it. Any
# other way to Helm or kustomize fails the check.
rule "agent without Helm or kustomize" \
	"^$m/agent(/|\$)" "" \
	'^(helm\.sh/|sigs\.k8s\.io/kustomize/(api|kustomize|cmd)(/|$))' \
	'^k8s\.io/cli-runtime/pkg/resource$' \
	"the agent applies what the controller rendered: it must not link the Helm SDK or kustomize (internal/manifest decodes manifests)"

# Not looked into: Helm v4, which imports testing to call testing.Testing().
rule "no test code in production packages" \
	"^$m(/|\$)" "$helpers" \
	"^testing\$|$helpers" '^helm\.sh/helm/v4/' \
	"only _test.go files and test helper packages may import testing or a test helper (test helpers belong in dev/testenv)"

# The product is every package of the module but the harness (dev/), the
# suites that run several parts together (test/), the build helpers (hack/)
# and the test helpers.
product_except="^$m/(dev|test|hack)(/|\$)|$helpers"

rule "the product does not link the dev harness" \
	"^$m(/|\$)" "$product_except" \
	"^$m/dev(/|\$)" "" \
	"no product package may import dev/ (test control planes, the test environment, dev clusters, images, benchmarks, fleet-dev): the harness links the product, never the reverse"

# The product binary, cmd/fleet, is the image's only program and the CLI
# users install: its whole dependency graph, third-party packages included,
# holds no harness, no test helper and no test control plane. Go's own
# testing package is allowed only where Helm v4 links it: its
# pkg/chart/common and internal/version call testing.Testing() in non-test
# code (helm/helm#32047, open upstream); nothing of ours may.
rule "the product binary holds no harness and no test code" \
	"^$m/cmd/fleet\$" "" \
	"^$m/dev(/|\$)|$helpers|(^|/)envtest(/|\$)|^testing\$|^$m(/.*)?/[a-z0-9]*test\$" '^helm\.sh/helm/v4/' \
	"the image and the CLI run product code only: fleet-dev (dev/cmd/fleet-dev) is the binary of the dev clusters, benchmarks and test environments"

# fleet opens SOPS files with age keys only (gitops/sops); sops' library
# would link every cloud KMS SDK it supports, which the product never calls.
rule "the product binary links no cloud KMS SDK" \
	"^$m/cmd/fleet\$" "" \
	'^github\.com/getsops/sops/v3(/(aes|keyservice|kms|gcpkms|azkv|hcvault|hckms|pgp|stores(/.*)?))?$|^github\.com/aws/|^cloud\.google\.com/|^github\.com/Azure/|^github\.com/hashicorp/vault/|^github\.com/huaweicloud/' "" \
	"fleet gitops reads SOPS files with gitops/sops (age keys only): sops' own library links the SDKs of every KMS it supports"

if [[ $failed != 0 ]]; then
	exit 1
fi
echo "layering: ok"
