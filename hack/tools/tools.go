//go:build tools

// Package tools pins the binaries this module builds.
package tools

import (
	// bin/helm3: the Helm 3 CLI the render parity tests compare with (bin/helm,
	// Helm 4, is a tool of the main module).
	_ "helm.sh/helm/v3/cmd/helm"
	_ "k8s.io/kubectl/pkg/cmd"
	_ "k8s.io/kubernetes/cmd/kube-apiserver/app"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	_ "k8s.io/kubernetes/cmd/kube-scheduler/app"
	_ "k8s.io/kubernetes/cmd/kubelet/app"
	_ "sigs.k8s.io/controller-tools/cmd/controller-gen"
)
