package names

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

// NewClusterNamespace is the per-cluster namespace of Cluster
// workspace/cluster as the controller creates it: labelled and annotated
// with the Cluster it belongs to.
func NewClusterNamespace(workspace, cluster string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: ClusterNamespace(workspace, cluster),
		Labels: map[string]string{
			fleet.ManagedLabel:          "true",
			fleet.ClusterNamespaceLabel: workspace,
			fleet.ClusterLabel:          cluster,
		},
		Annotations: map[string]string{
			fleet.ClusterNamespaceAnnotation: workspace,
			fleet.ClusterAnnotation:          cluster,
		},
	}}
}

// NamespaceIsFor reports whether an existing namespace was made for Cluster
// workspace/cluster. Shortened names end in a short hash, so a chosen
// Cluster name can produce another Cluster's namespace name; only the
// namespace's own annotations (full names, unlike labels) tell them apart.
func NamespaceIsFor(ns *corev1.Namespace, workspace, cluster string) bool {
	a := ns.GetAnnotations()
	return a[fleet.ClusterNamespaceAnnotation] == workspace && a[fleet.ClusterAnnotation] == cluster
}
