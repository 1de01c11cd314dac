package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
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

	// rolloutStrategy controls how a change reaches the targeted clusters:
	// in partitions, each one waiting until the one before is available.
	// +optional
	RolloutStrategy *RolloutStrategy `json:"rolloutStrategy,omitempty"`

	// targetCustomizationMode is FirstMatch (default: a cluster takes the
	// options of the first target that selects it) or AllMatches (the
	// options of every target that selects it, laid over each other in
	// order).
	// +optional
	// +kubebuilder:validation:Enum="";FirstMatch;AllMatches
	TargetCustomizationMode TargetCustomizationMode `json:"targetCustomizationMode,omitempty"`

	// targetRestrictions, when set, limit targets to the clusters one of
	// them also selects (written by fleet apply from a GitRepo's targets, so
	// a fleet.yaml cannot widen them).
	// +optional
	// +listType=atomic
	TargetRestrictions []BundleTargetRestriction `json:"targetRestrictions,omitempty"`

	// dependsOn names Bundles that must be in an accepted state on the same
	// cluster before this Bundle is applied there.
	// +optional
	// +listType=atomic
	DependsOn []BundleRef `json:"dependsOn,omitempty"`

	// contentsId names a Content object holding the resources (Fleet's OCI
	// and HelmOp storage).
	// +optional
	ContentsID string `json:"contentsId,omitempty"`

	// helmOpOptions are the options of a Bundle made by a HelmOp.
	// +optional
	HelmOpOptions *BundleHelmOptions `json:"helmOpOptions,omitempty"`

	// valuesHash is the hash of the values Secret fleet apply wrote for this
	// Bundle.
	// +optional
	ValuesHash string `json:"valuesHash,omitempty"`

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
	// yaml selects overlays for plain manifests.
	// +optional
	YAML *YAMLOptions `json:"yaml,omitempty"`
	// createNamespace: nil or true creates the target namespace downstream
	// when missing; false requires it to exist.
	// +optional
	CreateNamespace *bool `json:"createNamespace,omitempty"`
	// diff says what drift detection ignores.
	// +optional
	Diff *DiffOptions `json:"diff,omitempty"`
	// deleteNamespace deletes the target namespace downstream when the
	// Bundle is deleted or leaves the cluster.
	// +optional
	DeleteNamespace bool `json:"deleteNamespace,omitempty"`
	// ignore says what readiness ignores.
	// +optional
	IgnoreOptions *IgnoreOptions `json:"ignore,omitempty"`
	// deleteCRDResources deletes the Bundle's CustomResourceDefinitions
	// downstream (and with them every object of their kinds) when the
	// Bundle is deleted; by default CRDs stay.
	// +optional
	DeleteCRDResources bool `json:"deleteCRDResources,omitempty"`
	// downstreamResources are Secrets and ConfigMaps of the Bundle's
	// namespace copied into each target cluster.
	// +optional
	// +listType=atomic
	DownstreamResources []DownstreamResource `json:"downstreamResources,omitempty"`
	// overwrites lists resources this Bundle may take over from another
	// Bundle.
	// +optional
	// +listType=atomic
	Overwrites []OverwrittenResource `json:"overwrites,omitempty"`
	// allowedTargetNamespaceSelector restricts the target namespaces to
	// those whose labels match (set from a GitRepoRestriction).
	// +optional
	AllowedTargetNamespaceSelector *metav1.LabelSelector `json:"allowedTargetNamespaceSelector,omitempty"`
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
	// repo is the chart repository (https:// or oci://) chart is taken from.
	// +optional
	Repo string `json:"repo,omitempty"`
	// version is the chart version (a semver range) taken from repo.
	// +optional
	Version string `json:"version,omitempty"`
	// templateValues are values rendered per cluster: each value is a
	// template over the target Cluster (as ${ } values are).
	// +optional
	TemplateValues map[string]string `json:"templateValues,omitempty"`
	// valuesFrom reads values from ConfigMaps and Secrets, merged in order
	// after valuesFiles and before values.
	// +optional
	// +listType=atomic
	ValuesFrom []ValuesFrom `json:"valuesFrom,omitempty"`
	// force replaces resources that cannot be patched.
	// +optional
	Force bool `json:"force,omitempty"`
	// maxHistory is how many earlier deployments are kept to go back to.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MaxHistory int `json:"maxHistory,omitempty"`
	// waitForJobs makes the health wait include Jobs' completion.
	// +optional
	WaitForJobs bool `json:"waitForJobs,omitempty"`
	// atomic goes back to the previous deployment when this one fails.
	// +optional
	Atomic bool `json:"atomic,omitempty"`
	// disablePreProcess turns off ${ } templating of values.
	// +optional
	DisablePreProcess bool `json:"disablePreProcess,omitempty"`
	// disableDNS turns off DNS lookups in templates (always off here: we
	// render without network).
	// +optional
	DisableDNS bool `json:"disableDNS,omitempty"`
	// skipSchemaValidation renders without checking values against the
	// chart's values.schema.json.
	// +optional
	SkipSchemaValidation bool `json:"skipSchemaValidation,omitempty"`
	// disableDependencyUpdate uses the chart's charts/ as they are.
	// +optional
	DisableDependencyUpdate bool `json:"disableDependencyUpdate,omitempty"`
}

// ValuesFrom is one source of Helm values.
type ValuesFrom struct {
	// +optional
	ConfigMapKeyRef *ConfigMapKeySelector `json:"configMapKeyRef,omitempty"`
	// +optional
	SecretKeyRef *SecretKeySelector `json:"secretKeyRef,omitempty"`
}

// ConfigMapKeySelector names a key of a ConfigMap.
type ConfigMapKeySelector struct {
	LocalObjectReference `json:",inline"`
	// namespace defaults to the Bundle's.
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// key defaults to values.yaml.
	// +optional
	Key string `json:"key,omitempty"`
}

// SecretKeySelector names a key of a Secret.
type SecretKeySelector struct {
	LocalObjectReference `json:",inline"`
	// namespace defaults to the Bundle's.
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// key defaults to values.yaml.
	// +optional
	Key string `json:"key,omitempty"`
}

// LocalObjectReference names an object in a known namespace.
type LocalObjectReference struct {
	// +required
	Name string `json:"name"`
}

// YAMLOptions select overlays for plain manifests.
type YAMLOptions struct {
	// overlays are directory names under overlays/; their files replace
	// or (name_patch.yaml) patch the Bundle's manifests, in order.
	// +optional
	// +listType=atomic
	Overlays []string `json:"overlays,omitempty"`
}

// DiffOptions say what drift detection ignores.
type DiffOptions struct {
	// +optional
	// +listType=atomic
	ComparePatches []ComparePatch `json:"comparePatches,omitempty"`
}

// ComparePatch names a resource and the parts of it drift detection
// ignores.
type ComparePatch struct {
	// +optional
	APIVersion string `json:"apiVersion,omitempty"`
	// +optional
	Kind string `json:"kind,omitempty"`
	// +optional
	Name string `json:"name,omitempty"`
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// jsonPointers (RFC 6901) are ignored.
	// +optional
	// +listType=atomic
	JsonPointers []string `json:"jsonPointers,omitempty"`
	// operations are JSON patch operations applied to both sides before
	// comparing; op "ignore" ignores path.
	// +optional
	// +listType=atomic
	Operations []Operation `json:"operations,omitempty"`
}

// Operation is one JSON patch operation.
type Operation struct {
	// +optional
	Op string `json:"op,omitempty"`
	// +optional
	Path string `json:"path,omitempty"`
	// +optional
	Value string `json:"value,omitempty"`
}

// IgnoreOptions say what readiness ignores.
type IgnoreOptions struct {
	// conditions: a resource condition matching every key/value of one of
	// these maps (for example type: Ready, status: "False") does not make
	// the resource not ready.
	// +optional
	// +listType=atomic
	Conditions []map[string]string `json:"conditions,omitempty"`
}

// DownstreamResource names a Secret or ConfigMap of the Bundle's namespace.
type DownstreamResource struct {
	// kind is Secret or ConfigMap.
	// +optional
	Kind string `json:"kind,omitempty"`
	// +optional
	Name string `json:"name,omitempty"`
}

// OverwrittenResource names a resource another Bundle may own.
type OverwrittenResource struct {
	// +optional
	Name string `json:"name,omitempty"`
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// +optional
	Kind string `json:"kind,omitempty"`
}

// BundleRef names a Bundle, or Bundles by label, and the states accepted
// of them.
type BundleRef struct {
	// name of a Bundle in the same namespace.
	// +optional
	Name string `json:"name,omitempty"`
	// selector matches Bundles of the same namespace by label.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
	// acceptedStates default to Ready.
	// +optional
	// +listType=atomic
	AcceptedStates []BundleState `json:"acceptedStates,omitempty"`
}

// RolloutStrategy controls how a change reaches the targeted clusters.
type RolloutStrategy struct {
	// maxUnavailable clusters (number or percentage, default 100%) may be
	// unavailable before the rollout stops.
	// +optional
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
	// maxUnavailablePartitions (number or percentage, default 0) may be
	// unavailable before the rollout stops.
	// +optional
	MaxUnavailablePartitions *intstr.IntOrString `json:"maxUnavailablePartitions,omitempty"`
	// autoPartitionSize (number or percentage, default 25%) sizes the
	// partitions made when none are listed.
	// +optional
	AutoPartitionSize *intstr.IntOrString `json:"autoPartitionSize,omitempty"`
	// autoPartitionThreshold: fewer targeted clusters than this (default
	// 200) make one partition.
	// +optional
	AutoPartitionThreshold *int `json:"autoPartitionThreshold,omitempty"`
	// maxNew is how many BundleDeployments are created or changed in one
	// pass (default 50).
	// +optional
	MaxNew *int `json:"maxNew,omitempty"`
	// partitions list the partitions in order; clusters no partition
	// selects form a last one.
	// +optional
	// +listType=atomic
	Partitions []Partition `json:"partitions,omitempty"`
}

// Partition is a set of clusters a rollout moves through together.
type Partition struct {
	// +optional
	Name string `json:"name,omitempty"`
	// maxUnavailable overrides the strategy's for this partition.
	// +optional
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
	// +optional
	ClusterName string `json:"clusterName,omitempty"`
	// +optional
	ClusterSelector *metav1.LabelSelector `json:"clusterSelector,omitempty"`
	// +optional
	ClusterGroup string `json:"clusterGroup,omitempty"`
	// +optional
	ClusterGroupSelector *metav1.LabelSelector `json:"clusterGroupSelector,omitempty"`
}

// BundleTargetRestriction is a cluster set targets must stay within.
type BundleTargetRestriction struct {
	// +optional
	Name string `json:"name,omitempty"`
	// +optional
	ClusterName string `json:"clusterName,omitempty"`
	// +optional
	ClusterSelector *metav1.LabelSelector `json:"clusterSelector,omitempty"`
	// +optional
	ClusterGroup string `json:"clusterGroup,omitempty"`
	// +optional
	ClusterGroupSelector *metav1.LabelSelector `json:"clusterGroupSelector,omitempty"`
}

// BundleHelmOptions are the chart source options of a HelmOp Bundle.
type BundleHelmOptions struct {
	// helmOpSecretName names the Secret with the repository's credentials.
	// +optional
	SecretName string `json:"helmOpSecretName,omitempty"`
	// +optional
	InsecureSkipTLSverify bool `json:"helmOpInsecureSkipTLSVerify,omitempty"`
	// +optional
	CABundle []byte `json:"helmOpCABundle,omitempty"`
}

// TargetCustomizationMode says which targets' options a cluster takes.
type TargetCustomizationMode string

const (
	// TargetCustomizationModeFirstMatch: the first target selecting a
	// cluster gives its options (the default).
	TargetCustomizationModeFirstMatch TargetCustomizationMode = "FirstMatch"
	// TargetCustomizationModeAllMatches: every target selecting a cluster
	// lays its options over the previous ones, in order.
	TargetCustomizationModeAllMatches TargetCustomizationMode = "AllMatches"
)

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
	// keepFailHistory is accepted for Fleet's manifests; it keeps failed
	// Helm releases there, and there are none here.
	// +optional
	KeepFailHistory bool `json:"keepFailHistory,omitempty"`
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
	// newlyCreated is how many BundleDeployments the last pass created
	// (at most rolloutStrategy.maxNew).
	// +optional
	NewlyCreated int `json:"newlyCreated,omitempty"`
	// unavailable is the number of BundleDeployments not ready or not yet
	// at their deploymentID.
	// +optional
	Unavailable int `json:"unavailable"`
	// unavailablePartitions counts the partitions with more unavailable
	// clusters than their maxUnavailable.
	// +optional
	UnavailablePartitions int `json:"unavailablePartitions"`
	// maxUnavailable is the rollout's limit of unavailable
	// BundleDeployments, as a number.
	// +optional
	MaxUnavailable int `json:"maxUnavailable"`
	// maxUnavailablePartitions is the rollout's limit of unavailable
	// partitions, as a number.
	// +optional
	MaxUnavailablePartitions int `json:"maxUnavailablePartitions"`
	// partitions are the rollout's partitions and their state.
	// +optional
	// +listType=atomic
	PartitionStatus []PartitionStatus `json:"partitions,omitempty"`
	// resourceKey lists the Bundle's resources as rendered without target
	// customisation (a cluster's may differ).
	// +optional
	// +listType=atomic
	ResourceKey []ResourceKey `json:"resourceKey,omitempty"`
	// ociReference is where Fleet stores large content in an OCI
	// registry; informational.
	// +optional
	OCIReference string `json:"ociReference,omitempty"`
	// resourceCounts sums the resourceCounts of the Bundle's
	// BundleDeployments (Fleet has it on GitRepos and Clusters, not on
	// Bundles).
	// +optional
	ResourceCounts ResourceCounts `json:"resourceCounts,omitempty"`
}

// PartitionStatus is the state of one rollout partition.
type PartitionStatus struct {
	// +optional
	Name string `json:"name,omitempty"`
	// count is the number of clusters in the partition.
	// +optional
	Count int `json:"count,omitempty"`
	// maxUnavailable is the partition's limit of unavailable clusters.
	// +optional
	MaxUnavailable int `json:"maxUnavailable,omitempty"`
	// unavailable is the number of unavailable clusters in the partition.
	// +optional
	Unavailable int `json:"unavailable,omitempty"`
	// summary counts the partition's BundleDeployments by state.
	// +optional
	Summary BundleSummary `json:"summary,omitempty"`
}

// ResourceKey names one resource of a Bundle.
type ResourceKey struct {
	// +optional
	Kind string `json:"kind,omitempty"`
	// +optional
	APIVersion string `json:"apiVersion,omitempty"`
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// +optional
	Name string `json:"name,omitempty"`
}

// ResourceCounts count resources by state (Fleet's meanings).
type ResourceCounts struct {
	// ready: applied, unchanged and healthy.
	// +optional
	Ready int `json:"ready"`
	// desiredReady: every resource that should be there (those present and
	// those missing).
	// +optional
	DesiredReady int `json:"desiredReady"`
	// waitApplied: resources of a deployment not applied yet.
	// +optional
	WaitApplied int `json:"waitApplied"`
	// modified: present but changed downstream.
	// +optional
	Modified int `json:"modified"`
	// orphaned: present downstream but no longer in the Bundle.
	// +optional
	Orphaned int `json:"orphaned"`
	// missing: in the Bundle but not present downstream.
	// +optional
	Missing int `json:"missing"`
	// unknown: state not known (the agent did not report).
	// +optional
	Unknown int `json:"unknown"`
	// notReady: present and unchanged, but not healthy.
	// +optional
	NotReady int `json:"notReady"`
}

// Add adds o's counts to c.
func (c *ResourceCounts) Add(o ResourceCounts) {
	c.Ready += o.Ready
	c.DesiredReady += o.DesiredReady
	c.WaitApplied += o.WaitApplied
	c.Modified += o.Modified
	c.Orphaned += o.Orphaned
	c.Missing += o.Missing
	c.Unknown += o.Unknown
	c.NotReady += o.NotReady
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
