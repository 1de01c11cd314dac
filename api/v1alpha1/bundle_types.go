package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Bundle is a set of Kubernetes resources (raw manifests, a Helm chart with
// values, and/or a kustomize overlay) and the clusters it targets. The
// controller renders it per target cluster into a BundleDeployment in that
// cluster's namespace; the cluster's agent applies it with server-side apply.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=fleet,shortName={fleetbundle,fb}
// +kubebuilder:printcolumn:name="Bundledeployments-Ready",type=string,JSONPath=`.status.display.readyClusters`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Bundle struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec BundleSpec `json:"spec,omitempty"`
	// +optional
	Status BundleStatus `json:"status,omitempty"`
}

// BundleList is a list of Bundles.
//
// +kubebuilder:object:root=true
type BundleList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Bundle `json:"items"`
}

// BundleSpec is the content of a Bundle and where it goes.
type BundleSpec struct {
	BundleDeploymentOptions `json:",inline"`

	// paused stops changes to this Bundle's BundleDeployments.
	// +optional
	Paused bool `json:"paused,omitempty"`

	// resources are the Bundle's files: manifests, chart files, kustomize
	// files. Paths are relative to the Bundle root.
	// +optional
	// +listType=atomic
	Resources []BundleResource `json:"resources,omitempty"`

	// targets choose the clusters. A cluster matching several targets takes
	// the options of the first one.
	// +optional
	// +listType=atomic
	Targets []BundleTarget `json:"targets,omitempty"`
}

// BundleResource is one file of a Bundle.
type BundleResource struct {
	// name is the file's path within the Bundle.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Name string `json:"name"`
	// content is the file's content, encoded as encoding says.
	// +optional
	Content string `json:"content,omitempty"`
	// encoding is empty (plain text), "base64" or "base64+gz".
	// +optional
	// +kubebuilder:validation:Enum="";base64;base64+gz
	Encoding string `json:"encoding,omitempty"`
}

// BundleTarget selects clusters and may customise the options for them.
type BundleTarget struct {
	BundleDeploymentOptions `json:",inline"`

	// name describes the target.
	// +optional
	Name string `json:"name,omitempty"`
	// clusterName selects one Cluster by name.
	// +optional
	ClusterName string `json:"clusterName,omitempty"`
	// clusterSelector selects Clusters by label.
	// +optional
	ClusterSelector *metav1.LabelSelector `json:"clusterSelector,omitempty"`
	// clusterGroup selects the Clusters of one ClusterGroup.
	// +optional
	ClusterGroup string `json:"clusterGroup,omitempty"`
	// clusterGroupSelector selects the Clusters of ClusterGroups by label.
	// +optional
	ClusterGroupSelector *metav1.LabelSelector `json:"clusterGroupSelector,omitempty"`
	// doNotDeploy excludes the matched clusters.
	// +optional
	DoNotDeploy bool `json:"doNotDeploy,omitempty"`
}

// BundleDeploymentOptions say how a Bundle is rendered and applied.
type BundleDeploymentOptions struct {
	// defaultNamespace is the namespace of namespaced resources that name
	// none.
	// +optional
	DefaultNamespace string `json:"defaultNamespace,omitempty"`
	// namespace forces every namespaced resource into this namespace.
	// +optional
	TargetNamespace string `json:"namespace,omitempty"`
	// helm renders a chart from the Bundle's resources.
	// +optional
	Helm *HelmOptions `json:"helm,omitempty"`
	// kustomize applies an overlay from the Bundle's resources.
	// +optional
	Kustomize *KustomizeOptions `json:"kustomize,omitempty"`
	// correctDrift makes the agent revert changes made downstream.
	// +optional
	CorrectDrift *CorrectDrift `json:"correctDrift,omitempty"`
	// keepResources leaves resources downstream when they leave the Bundle
	// or the Bundle is deleted.
	// +optional
	KeepResources bool `json:"keepResources,omitempty"`
	// forceSyncGeneration: change it to make the agent apply again.
	// +optional
	ForceSyncGeneration int64 `json:"forceSyncGeneration,omitempty"`
	// namespaceLabels are set on defaultNamespace/namespace downstream.
	// +optional
	NamespaceLabels map[string]string `json:"namespaceLabels,omitempty"`
	// namespaceAnnotations are set on defaultNamespace/namespace downstream.
	// +optional
	NamespaceAnnotations map[string]string `json:"namespaceAnnotations,omitempty"`
	// serviceAccount names a ServiceAccount in the agent's namespace of each
	// target cluster (cattle-fleet-system by default), as Fleet does: the
	// agent applies, dry-runs, diffs, health-checks and prunes the Bundle's
	// resources as that ServiceAccount (impersonation), so the downstream
	// cluster's RBAC for it bounds what the Bundle may do there. It needs
	// get, create, patch and delete on what the Bundle holds. Empty: the
	// agent's own identity. Unlike Fleet, no "fleet-default" ServiceAccount
	// is used implicitly.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	ServiceAccount string `json:"serviceAccount,omitempty"`
}

// HelmOptions render a chart.
type HelmOptions struct {
	// chart is the chart's directory within the Bundle's resources.
	// +optional
	Chart string `json:"chart,omitempty"`
	// releaseName names the release; default the Bundle's name.
	// +optional
	// +kubebuilder:validation:MaxLength=53
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	ReleaseName string `json:"releaseName,omitempty"`
	// values are the chart values; target values are merged on top.
	// +optional
	Values *GenericMap `json:"values,omitempty"`
	// valuesFiles are values files within the Bundle's resources, merged in
	// order before values.
	// +optional
	// +listType=atomic
	ValuesFiles []string `json:"valuesFiles,omitempty"`
	// takeOwnership lets the agent take over resources made by others.
	// +optional
	TakeOwnership bool `json:"takeOwnership,omitempty"`
	// timeoutSeconds bounds the health wait after an apply.
	// +optional
	// +kubebuilder:validation:Minimum=0
	TimeoutSeconds int `json:"timeoutSeconds,omitempty"`
}

// KustomizeOptions apply a kustomize overlay.
type KustomizeOptions struct {
	// dir is the directory within the Bundle's resources holding the
	// kustomization.yaml.
	// +optional
	Dir string `json:"dir,omitempty"`
}

// CorrectDrift configures drift correction.
type CorrectDrift struct {
	// enabled reverts changes made downstream to applied resources.
	// +optional
	Enabled bool `json:"enabled,omitempty"`
	// force deletes and recreates resources that cannot be patched back.
	// +optional
	Force bool `json:"force,omitempty"`
}

// BundleStatus aggregates the Bundle's BundleDeployments.
type BundleStatus struct {
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// summary counts the BundleDeployments by state.
	// +optional
	Summary BundleSummary `json:"summary,omitempty"`
	// +optional
	Display BundleDisplay `json:"display,omitempty"`
	// resourcesSha256Sum is the hash of the Bundle's resources.
	// +optional
	ResourcesSHA256Sum string `json:"resourcesSha256Sum,omitempty"`
}

// BundleDisplay holds short strings for kubectl columns.
type BundleDisplay struct {
	// +optional
	ReadyClusters string `json:"readyClusters,omitempty"`
	// +optional
	State string `json:"state,omitempty"`
}

// BundleSummary counts BundleDeployments by state.
type BundleSummary struct {
	// +optional
	NotReady int `json:"notReady,omitempty"`
	// +optional
	WaitApplied int `json:"waitApplied,omitempty"`
	// +optional
	ErrApplied int `json:"errApplied,omitempty"`
	// +optional
	OutOfSync int `json:"outOfSync,omitempty"`
	// +optional
	Modified int `json:"modified,omitempty"`
	// +optional
	Ready int `json:"ready"`
	// +optional
	Pending int `json:"pending,omitempty"`
	// +optional
	DesiredReady int `json:"desiredReady"`
	// nonReadyResources lists up to 10 BundleDeployments that are not Ready.
	// +optional
	// +listType=atomic
	NonReadyResources []NonReadyResource `json:"nonReadyResources,omitempty"`
}

// NonReadyResource names a BundleDeployment that is not Ready, and why.
type NonReadyResource struct {
	// name is namespace/name of the BundleDeployment.
	// +optional
	Name string `json:"name,omitempty"`
	// +optional
	State BundleState `json:"bundleState,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
	// +optional
	// +listType=atomic
	ModifiedStatus []ModifiedStatus `json:"modifiedStatus,omitempty"`
	// +optional
	// +listType=atomic
	NonReadyStatus []NonReadyStatus `json:"nonReadyStatus,omitempty"`
}

// BundleState is the state of one BundleDeployment, ranked worst first:
// ErrApplied, WaitApplied, Modified, OutOfSync, Pending, NotReady, Ready.
type BundleState string

const (
	Ready       BundleState = "Ready"
	NotReady    BundleState = "NotReady"
	WaitApplied BundleState = "WaitApplied"
	ErrApplied  BundleState = "ErrApplied"
	OutOfSync   BundleState = "OutOfSync"
	Pending     BundleState = "Pending"
	Modified    BundleState = "Modified"
)

// StateRank orders states from best (1) to worst.
var StateRank = map[BundleState]int{
	ErrApplied:  7,
	WaitApplied: 6,
	Modified:    5,
	OutOfSync:   4,
	Pending:     3,
	NotReady:    2,
	Ready:       1,
}

func init() {
	SchemeBuilder.Register(&Bundle{}, &BundleList{})
}
