package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ClusterGroup selects Clusters in its namespace by label, so Bundles can
// target the group.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=fleet,shortName=cg
// +kubebuilder:printcolumn:name="Clusters-Ready",type=string,JSONPath=`.status.display.readyClusters`
// +kubebuilder:printcolumn:name="Bundles-Ready",type=string,JSONPath=`.status.display.readyBundles`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ClusterGroup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec ClusterGroupSpec `json:"spec,omitempty"`
	// +optional
	Status ClusterGroupStatus `json:"status,omitempty"`
}

// ClusterGroupList is a list of ClusterGroups.
//
// +kubebuilder:object:root=true
type ClusterGroupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterGroup `json:"items"`
}

// ClusterGroupSpec selects the group's Clusters.
type ClusterGroupSpec struct {
	// selector picks Clusters in the group's namespace by label. An empty
	// selector selects every Cluster; a missing one selects none.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
}

// ClusterGroupStatus counts the group's Clusters and their Bundles.
type ClusterGroupStatus struct {
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// clusterCount is the number of selected Clusters.
	// +optional
	ClusterCount int `json:"clusterCount"`
	// nonReadyClusterCount is the number of selected Clusters not Ready.
	// +optional
	NonReadyClusterCount int `json:"nonReadyClusterCount"`
	// nonReadyClusters names up to 10 Clusters that are not Ready.
	// +optional
	// +listType=atomic
	NonReadyClusters []string `json:"nonReadyClusters,omitempty"`
	// summary counts the BundleDeployments of the selected Clusters by state.
	// +optional
	Summary BundleSummary `json:"summary,omitempty"`
	// +optional
	Display ClusterGroupDisplay `json:"display,omitempty"`
}

// ClusterGroupDisplay holds short strings for kubectl columns.
type ClusterGroupDisplay struct {
	// +optional
	ReadyClusters string `json:"readyClusters,omitempty"`
	// +optional
	ReadyBundles string `json:"readyBundles,omitempty"`
	// +optional
	State string `json:"state,omitempty"`
}

func init() {
	SchemeBuilder.Register(&ClusterGroup{}, &ClusterGroupList{})
}
