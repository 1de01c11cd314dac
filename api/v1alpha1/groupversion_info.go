// Package v1alpha1 holds the fleet.cattle.io/v1alpha1 API: the kinds users keep
// in git (Cluster, ClusterGroup, ClusterRegistrationToken, Bundle) and the kinds
// the controller and agents exchange (ClusterRegistration, BundleDeployment).
// Kind and field names follow rancher/fleet so existing manifests keep working.
//
// +kubebuilder:object:generate=true
// +groupName=fleet.cattle.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the API group and version of every kind in this package.
	GroupVersion = schema.GroupVersion{Group: "fleet.cattle.io", Version: "v1alpha1"}

	// SchemeBuilder registers the kinds of this package with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the kinds of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
