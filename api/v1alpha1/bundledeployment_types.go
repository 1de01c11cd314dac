package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// BundleDeployment is one Bundle rendered for one cluster, in that cluster's
// namespace. The cluster's agent applies it and reports its status.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=fleet,shortName=bd
// +kubebuilder:printcolumn:name="Deployed",type=string,JSONPath=`.status.display.deployed`
// +kubebuilder:printcolumn:name="Monitored",type=string,JSONPath=`.status.display.monitored`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BundleDeployment struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec BundleDeploymentSpec `json:"spec,omitempty"`
	// +optional
	Status BundleDeploymentStatus `json:"status,omitempty"`
}

// BundleDeploymentList is a list of BundleDeployments.
//
// +kubebuilder:object:root=true
type BundleDeploymentList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BundleDeployment `json:"items"`
}

// BundleDeploymentSpec is what the agent should apply.
type BundleDeploymentSpec struct {
	// paused stops the agent from applying changes.
	// +optional
	Paused bool `json:"paused,omitempty"`
	// stagedOptions and stagedDeploymentID are the next deployment, held
	// back while paused.
	// +optional
	StagedOptions BundleDeploymentOptions `json:"stagedOptions,omitempty"`
	// +optional
	StagedDeploymentID string `json:"stagedDeploymentID,omitempty"`
	// options are the deployment options of the Bundle for this cluster.
	// +optional
	Options BundleDeploymentOptions `json:"options,omitempty"`
	// deploymentID is "<manifestID>:<optionsHash>"; the agent applies when it
	// differs from status.appliedDeploymentID.
	// +optional
	DeploymentID string `json:"deploymentID,omitempty"`
	// dependsOn are the Bundle's dependencies, checked on this cluster.
	// +optional
	// +listType=atomic
	DependsOn []BundleRef `json:"dependsOn,omitempty"`
	// ociContents: the content is in an OCI registry (Fleet's storage).
	// +optional
	OCIContents bool `json:"ociContents,omitempty"`
	// helmChartOptions are the chart source options of a HelmOp Bundle.
	// +optional
	HelmChartOptions *BundleHelmOptions `json:"helmChartOptions,omitempty"`
	// valuesHash is the hash of the values Secret of the Bundle.
	// +optional
	ValuesHash string `json:"valuesHash,omitempty"`
	// downstreamResourcesGeneration changes when a copied Secret or
	// ConfigMap (options.downstreamResources) changes, so the agent copies
	// it again.
	// +optional
	DownstreamResourcesGeneration int64 `json:"downstreamResourcesGeneration,omitempty"`
	// offSchedule holds the deployment outside its Schedule's windows.
	// +optional
	OffSchedule bool `json:"offSchedule,omitempty"`
	// waitingForValues: the values Secret is not there yet.
	// +optional
	WaitingForValues bool `json:"waitingForValues,omitempty"`
	// correctDrift overrides options.correctDrift.
	// +optional
	CorrectDrift *CorrectDrift `json:"correctDrift,omitempty"`
}

// BundleDeploymentStatus is what the agent reports.
type BundleDeploymentStatus struct {
	// conditions: Ready, Deployed, Monitored.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// appliedDeploymentID is the deploymentID last applied.
	// +optional
	AppliedDeploymentID string `json:"appliedDeploymentID,omitempty"`
	// release is Fleet's Helm release ID ("<namespace>/<name>:<version>").
	// There are no Helm releases here; kept for Fleet's readers, not
	// written.
	// +optional
	Release string `json:"release,omitempty"`
	// ready is true when every applied resource is healthy.
	// +optional
	Ready bool `json:"ready,omitempty"`
	// nonModified is true when no applied resource drifted.
	// +optional
	NonModified bool `json:"nonModified,omitempty"`
	// nonReadyStatus lists up to 10 resources that are not ready.
	// +optional
	// +listType=atomic
	NonReadyStatus []NonReadyStatus `json:"nonReadyStatus,omitempty"`
	// modifiedStatus lists up to 10 resources that drifted.
	// +optional
	// +listType=atomic
	ModifiedStatus []ModifiedStatus `json:"modifiedStatus,omitempty"`
	// incompleteState is true when nonReadyStatus or modifiedStatus were
	// cut at 10 entries (resourceCounts counts them all).
	// +optional
	IncompleteState bool `json:"incompleteState,omitempty"`
	// resourceCounts counts the resources by state.
	// +optional
	ResourceCounts ResourceCounts `json:"resourceCounts,omitempty"`
	// downstreamResourcesGeneration is the
	// spec.downstreamResourcesGeneration whose copies are in place.
	// +optional
	DownstreamResourcesGeneration int64 `json:"downstreamResourcesGeneration,omitempty"`
	// resources is the inventory of applied resources.
	// +optional
	// +listType=atomic
	Resources []BundleDeploymentResource `json:"resources,omitempty"`
	// syncGeneration is the forceSyncGeneration last applied.
	// +optional
	SyncGeneration *int64 `json:"syncGeneration,omitempty"`
	// appliedAt is when the agent applied appliedDeploymentID at
	// syncGeneration; the health timeout counts from it.
	// +optional
	AppliedAt *metav1.Time `json:"appliedAt,omitempty"`
	// +optional
	Display BundleDeploymentDisplay `json:"display,omitempty"`
}

// BundleDeploymentDisplay holds short strings for kubectl columns.
type BundleDeploymentDisplay struct {
	// +optional
	Deployed string `json:"deployed,omitempty"`
	// +optional
	Monitored string `json:"monitored,omitempty"`
	// +optional
	State string `json:"state,omitempty"`
}

// BundleDeploymentResource identifies one applied resource.
type BundleDeploymentResource struct {
	// +optional
	Kind string `json:"kind,omitempty"`
	// +optional
	APIVersion string `json:"apiVersion,omitempty"`
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// +optional
	Name string `json:"name,omitempty"`
	// createdAt is the resource's creationTimestamp downstream.
	// +optional
	CreatedAt *metav1.Time `json:"createdAt,omitempty"`
}

// NonReadyStatus is a resource that is not ready, with its summary.
type NonReadyStatus struct {
	// uid is the resource's UID downstream (empty when it is missing).
	// +optional
	UID types.UID `json:"uid,omitempty"`
	// +optional
	Kind string `json:"kind,omitempty"`
	// +optional
	APIVersion string `json:"apiVersion,omitempty"`
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// +optional
	Name string `json:"name,omitempty"`
	// summary is the resource's state (kstatus's, in Fleet's shape).
	// +optional
	Summary Summary `json:"summary,omitempty"`
}

// ModifiedStatus is a resource that differs from what was applied.
type ModifiedStatus struct {
	// +optional
	Kind string `json:"kind,omitempty"`
	// +optional
	APIVersion string `json:"apiVersion,omitempty"`
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// +optional
	Name string `json:"name,omitempty"`
	// missing is true when the resource was deleted downstream.
	// +optional
	Create bool `json:"missing,omitempty"`
	// exist is true when the resource exists but another Bundle owns it
	// (with missing).
	// +optional
	Exist bool `json:"exist,omitempty"`
	// delete is true when the resource should not exist.
	// +optional
	Delete bool `json:"delete,omitempty"`
	// patch describes the drift.
	// +optional
	Patch string `json:"patch,omitempty"`
}

func init() {
	SchemeBuilder.Register(&BundleDeployment{}, &BundleDeploymentList{})
}
