#!/usr/bin/env bash
# Builds the local control-plane binaries and code generators into bin/ from
# the Go module proxy (module hack/tools), skipping any binary whose recorded
# version already matches. Usage: hack/build-tools.sh NAME...;
# hack/build-tools.sh --print-packages prints the packages it can build (for
# hack/sharedmods).
#
# The packages they have in common with the main module's (k8s.io/api,
# client-go, apiserver, golang.org/x/..., grpc, otel, ...) are compiled once
# for both: hack/tools requires the main module's versions of them (`make
# verify` checks it with hack/sharedmods) and this build uses the main
# module's flags (CGO_ENABLED=0, no -trimpath, which would change every
# package's build cache key).
set -euo pipefail
cd "$(dirname "$0")/tools"

kube_version=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=${kube_version} \
-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$(cut -d. -f2 <<<"$kube_version") \
-X helm.sh/helm/v3/internal/version.version=$(go list -m -f '{{.Version}}' helm.sh/helm/v3)"
# (An -X for a package a binary does not link is ignored: one line for all.)

pkg_of() {
  case "$1" in
    kube-apiserver|kube-controller-manager|kube-scheduler|kubelet) echo "k8s.io/kubernetes/cmd/$1" ;;
    kubectl) echo "k8s.io/kubernetes/cmd/kubectl" ;;
    etcd) echo "./etcd" ;;
    controller-gen) echo "sigs.k8s.io/controller-tools/cmd/controller-gen" ;;
    helm3) echo "helm.sh/helm/v3/cmd/helm" ;;
    *) echo "unknown tool $1" >&2; exit 2 ;;
  esac
}
all_tools=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl etcd controller-gen helm3)
if [[ ${1:-} == --print-packages ]]; then
  for name in "${all_tools[@]}"; do pkg_of "$name"; done
  exit 0
fi

BIN=${FLEET_BIN_DIR:-$(cd ../.. && pwd)/bin}
mkdir -p "$BIN"

# The stamp records what a binary was built from: the tools module's go.sum
# pins every dependency, so its hash changes exactly when a rebuild is due.
stamp_of() { sha256sum go.mod go.sum | sha256sum | cut -c1-16; }

# Build every missing or stale binary in one go build: the packages share
# most of their dependencies, and one invocation compiles them in parallel.
# go build names each binary after its package (helm3's is "helm"), so they
# are built into a scratch directory and moved to their names.
want="$(stamp_of)"
names=() pkgs=()
for name in "$@"; do
  stamp="$BIN/.$name.stamp"
  if [[ -x "$BIN/$name" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    continue
  fi
  names+=("$name")
  pkgs+=("$(pkg_of "$name")")
done
[[ ${#names[@]} -eq 0 ]] && exit 0
echo "building ${names[*]} from the Go module proxy (several minutes on a fresh machine)"
start=$(date +%s)
out=$(mktemp -d "$BIN/.build.XXXXXX")
trap 'rm -rf "$out"' EXIT
CGO_ENABLED=0 GOFLAGS=-mod=mod go build -ldflags "$ldflags" -o "$out/" "${pkgs[@]}"
for i in "${!names[@]}"; do
  name=${names[$i]} built="$out/$(basename "${pkgs[$i]}")"
  [[ -x "$built" ]] || { echo "build produced no $built for $name" >&2; exit 1; }
  mv -f "$built" "$BIN/$name"
  echo "$want" >"$BIN/.$name.stamp"
done
echo "built ${names[*]} in $(( $(date +%s) - start ))s"
