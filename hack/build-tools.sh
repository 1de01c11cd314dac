#!/usr/bin/env bash
# Builds the local control-plane binaries and code generators into bin/ from
# the Go module proxy (module hack/tools), skipping any binary whose recorded
# version already matches. Usage: hack/build-tools.sh NAME...
set -euo pipefail
cd "$(dirname "$0")/tools"
BIN=${FLEET_BIN_DIR:-$(cd ../.. && pwd)/bin}
mkdir -p "$BIN"

kube_version=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=${kube_version} \
-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$(cut -d. -f2 <<<"$kube_version")"

pkg_of() {
  case "$1" in
    kube-apiserver|kube-controller-manager|kube-scheduler|kubelet) echo "k8s.io/kubernetes/cmd/$1" ;;
    kubectl) echo "k8s.io/kubernetes/cmd/kubectl" ;;
    etcd) echo "./etcd" ;;
    controller-gen) echo "sigs.k8s.io/controller-tools/cmd/controller-gen" ;;
    helm) echo "helm.sh/helm/v3/cmd/helm" ;;
    *) echo "unknown tool $1" >&2; exit 2 ;;
  esac
}

# The stamp records what a binary was built from: the tools module's go.sum
# pins every dependency, so its hash changes exactly when a rebuild is due.
stamp_of() { sha256sum go.mod go.sum | sha256sum | cut -c1-16; }

# Build every missing or stale binary in one go build: the packages share
# most of their dependencies, and one invocation compiles them in parallel.
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
CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "$ldflags" -o "$BIN/" "${pkgs[@]}"
for name in "${names[@]}"; do
  [[ -x "$BIN/$name" ]] || { echo "build produced no $BIN/$name" >&2; exit 1; }
  echo "$want" >"$BIN/.$name.stamp"
done
echo "built ${names[*]} in $(( $(date +%s) - start ))s"
