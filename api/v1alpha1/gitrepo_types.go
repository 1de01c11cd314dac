package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Labels the source component sets on the Bundles it makes from a GitRepo
// (Fleet's names: `fleet apply` sets them, Fleet's status and Cluster
// controllers read them).
const (
	// RepoLabel on a Bundle (and, copied by the Bundle reconciler, on its
	// BundleDeployments) names the GitRepo of the Bundle's namespace that
	// made it.
	RepoLabel = "fleet.cattle.io/repo-name"
	// CommitLabel on a Bundle is the git commit it was made from.
	CommitLabel = "fleet.cattle.io/commit"
)

// Condition types of a GitRepo besides Ready, Reconciling and Stalled.
const (
	// GitRepoAcceptedCondition (GitRepo): the GitRepo passes the GitRepoRestrictions
	// of its namespace and the controller configuration. False with reason
	// RestrictionRefused (a restriction), InsecureSkipTLSVerifyRefused (the
	// configuration) or RestrictionInvalid (a restriction cannot be read).
	GitRepoAcceptedCondition = "Accepted"
)

// Reasons of a GitRepo's conditions.
const (
	// RestrictionRefusedReason (Accepted, Stalled): a GitRepoRestriction of
	// the namespace does not allow a value of the GitRepo; the message
	// names the field, the value and what is allowed.
	RestrictionRefusedReason = "RestrictionRefused"
	// RestrictionInvalidReason (Accepted, Stalled): a GitRepoRestriction of
	// the namespace holds a pattern or selector that cannot be used; the
	// message names the restriction and the field. Nothing of the namespace
	// is accepted until it is fixed (a restriction that cannot be read is
	// not skipped: that would widen what it allows).
	RestrictionInvalidReason = "RestrictionInvalid"
	// InsecureSkipTLSVerifyRefusedReason (Accepted, Stalled): the GitRepo
	// sets insecureSkipTLSVerify and the controller configuration does not
	// allow it (allowGitInsecureSkipTLSVerify).
	InsecureSkipTLSVerifyRefusedReason = "InsecureSkipTLSVerifyRefused"
	// BundlesNotReadyReason (Ready): a Bundle of the GitRepo, or one of its
	// BundleDeployments, is not ready; the message says which and why.
	BundlesNotReadyReason = "BundlesNotReady"
	// NoBundlesReason (Ready True): the GitRepo made no Bundle yet, or its
	// Bundles target no cluster.
	NoBundlesReason = "NoBundles"
)

// GitRepo is a git repository whose paths are turned into Bundles (one per
// fleet.yaml directory, as Fleet's `fleet apply` makes them) by the source
// component, the only part of fleet that reaches git servers and chart
// repositories. Its status folds the status of those Bundles.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=fleet,path=gitrepos
// +kubebuilder:printcolumn:name="Repo",type=string,JSONPath=`.spec.repo`
// +kubebuilder:printcolumn:name="Commit",type=string,JSONPath=`.status.commit`
// +kubebuilder:printcolumn:name="BundleDeployments-Ready",type=string,JSONPath=`.status.display.readyBundleDeployments`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`
type GitRepo struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec GitRepoSpec `json:"spec,omitempty"`
	// +optional
	Status GitRepoStatus `json:"status,omitempty"`
}

// GitRepoList is a list of GitRepos.
//
// +kubebuilder:object:root=true
type GitRepoList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GitRepo `json:"items"`
}

// GitRepoSpec is the repository, the ref, the paths and how their Bundles
// are deployed. Every field is Fleet's, with Fleet's meaning;
// docs/operations.md ("GitRepo and GitRepoRestriction") says what fleet does
// with each.
type GitRepoSpec struct {
	// repo is the URL of the git repository (https://, ssh://, git@host:path).
	// +required
	// +kubebuilder:validation:MinLength=1
	Repo string `json:"repo,omitempty"`

	// branch is the branch to follow (default: the remote's HEAD).
	// +optional
	Branch string `json:"branch,omitempty"`

	// revision is a commit or tag to deploy instead of following a branch.
	// +optional
	Revision string `json:"revision,omitempty"`

	// targetNamespace forces every namespaced resource of the Bundles into
	// this namespace; cluster-scoped resources are then refused.
	// +optional
	TargetNamespace string `json:"targetNamespace,omitempty"`

	// clientSecretName names a Secret of the GitRepo's namespace with the
	// git credentials: type kubernetes.io/basic-auth (username, password or
	// token) or kubernetes.io/ssh-auth (ssh-privatekey, and known_hosts).
	// +optional
	ClientSecretName string `json:"clientSecretName,omitempty"`

	// helmSecretName names a Secret of the GitRepo's namespace with the
	// credentials for private Helm chart repositories and registries.
	// +optional
	HelmSecretName string `json:"helmSecretName,omitempty"`

	// helmSecretNameForPaths names a Secret holding Helm credentials per
	// bundle path.
	// +optional
	HelmSecretNameForPaths string `json:"helmSecretNameForPaths,omitempty"`

	// helmRepoURLRegex: the helmSecretName credentials are sent only to
	// chart repositories whose URL matches this regular expression; empty:
	// to none.
	// +optional
	HelmRepoURLRegex string `json:"helmRepoURLRegex,omitempty"`

	// caBundle is the PEM CA bundle that verifies the git server's (and the
	// chart repositories') certificates.
	// +optional
	CABundle []byte `json:"caBundle,omitempty"`

	// insecureSkipTLSVerify skips the verification of the git server's
	// certificate. Refused unless the controller configuration allows it
	// (allowGitInsecureSkipTLSVerify).
	// +optional
	InsecureSkipTLSverify bool `json:"insecureSkipTLSVerify,omitempty"`

	// paths are the directories, relative to the repository's root, whose
	// fleet.yaml directories become Bundles; globs (charts/*) are allowed.
	// Empty: the root.
	// +optional
	// +listType=atomic
	Paths []string `json:"paths,omitempty"`

	// paused: changes in git are not deployed; the Bundles stay at what
	// they were and show OutOfSync.
	// +optional
	Paused bool `json:"paused,omitempty"`

	// serviceAccount names the ServiceAccount (in the agent's namespace of
	// each target cluster) the agent applies the Bundles as.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	ServiceAccount string `json:"serviceAccount,omitempty"`

	// targets are the clusters the Bundles are deployed to; a fleet.yaml's
	// targetCustomizations cannot widen them.
	// +optional
	// +listType=atomic
	Targets []GitTarget `json:"targets,omitempty"`

	// pollingInterval is how often the repository is asked for a new commit
	// (a Go duration such as 15s, 5m or 1h30m; default 15s). "0" is the
	// default too.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self == '0' || (self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') && duration(self) <= duration('2562047h'))",message="pollingInterval must be a Go duration such as 15s, 5m or 1h30m (units ns, us, µs, ms, s, m, h; days and weeks are not units), or 0 for the default"
	PollingInterval *metav1.Duration `json:"pollingInterval,omitempty"`

	// forceSyncGeneration: change it to fetch the repository and deploy its
	// Bundles again.
	// +optional
	ForceSyncGeneration int64 `json:"forceSyncGeneration,omitempty"`

	// imageScanInterval is Fleet's image-scan write-back interval (a Go
	// duration). Accepted for Fleet's manifests; fleet does not scan images.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self == '0' || (self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') && duration(self) <= duration('2562047h'))",message="imageScanInterval must be a Go duration such as 15s, 5m or 1h30m (units ns, us, µs, ms, s, m, h; days and weeks are not units), or 0"
	ImageSyncInterval *metav1.Duration `json:"imageScanInterval,omitempty"`

	// imageScanCommit is how Fleet's image scan commits to the repository.
	// Accepted for Fleet's manifests; fleet does not scan images.
	// +optional
	ImageScanCommit *CommitSpec `json:"imageScanCommit,omitempty"`

	// keepResources leaves the deployed resources downstream when the
	// GitRepo is deleted.
	// +optional
	KeepResources bool `json:"keepResources,omitempty"`

	// deleteNamespace deletes the target namespace downstream when the
	// GitRepo is deleted.
	// +optional
	DeleteNamespace bool `json:"deleteNamespace,omitempty"`

	// correctDrift makes the agents revert changes made downstream.
	// +optional
	CorrectDrift *CorrectDrift `json:"correctDrift,omitempty"`

	// disablePolling: the repository is asked only when a webhook arrives.
	// +optional
	DisablePolling bool `json:"disablePolling,omitempty"`

	// ociRegistrySecret names the Secret of Fleet's OCI storage of Bundle
	// contents. Accepted for Fleet's manifests; fleet keeps contents in
	// Secrets.
	// +optional
	OCIRegistrySecret string `json:"ociRegistrySecret,omitempty"`

	// webhookSecret names a Secret of the GitRepo's namespace holding the
	// secret webhook payloads for this repository are verified with.
	// +optional
	WebhookSecret string `json:"webhookSecret,omitempty"`

	// bundles lists the Bundle directories to read, each with the
	// fleet.yaml that configures it (Fleet's "driven" scan), instead of
	// scanning paths.
	// +optional
	// +listType=atomic
	Bundles []BundlePath `json:"bundles,omitempty"`

	// decryption decrypts the SOPS-encrypted Secrets of the paths with the
	// age identities of a Secret of the GitRepo's namespace. Not Fleet's:
	// our extension (Flux's kustomize-controller has the same field).
	// +optional
	Decryption *Decryption `json:"decryption,omitempty"`
}

// Decryption is how a GitRepo's encrypted files are decrypted (our
// extension; docs/operations.md "Encrypted Secrets").
type Decryption struct {
	// provider is the encryption format: sops (with age keys).
	// +kubebuilder:validation:Enum=sops
	// +required
	Provider string `json:"provider"`
	// secretRef names the Secret of the GitRepo's namespace holding the age
	// identities (data keys ending in .agekey).
	// +required
	SecretRef LocalObjectReference `json:"secretRef"`
}

// BundlePath is one directory of a driven scan.
type BundlePath struct {
	// base is the directory of the Bundle's resources.
	// +optional
	Base string `json:"base,omitempty"`
	// options is the fleet.yaml (relative to base) that configures it.
	// +optional
	Options string `json:"options,omitempty"`
}

// GitTarget selects clusters for a GitRepo's Bundles.
type GitTarget struct {
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
}

// CommitSpec is how Fleet's image scan commits (accepted, unused).
type CommitSpec struct {
	// +optional
	AuthorName string `json:"authorName"`
	// +optional
	AuthorEmail string `json:"authorEmail"`
	// +optional
	MessageTemplate string `json:"messageTemplate,omitempty"`
}

// GitRepoStatus is what the source component saw in git and what the
// GitRepo's Bundles report.
type GitRepoStatus struct {
	StatusBase `json:",inline"`

	// observedGeneration is the last spec generation fully acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration"`
	// updateGeneration is the forceSyncGeneration last acted on.
	// +optional
	UpdateGeneration int64 `json:"updateGeneration,omitempty"`
	// commit is the commit the Bundles were last made from.
	// +optional
	Commit string `json:"commit,omitempty"`
	// webhookCommit is the commit the last webhook named (not trusted: a
	// webhook only makes the source component ask the repository).
	// +optional
	WebhookCommit string `json:"webhookCommit,omitempty"`
	// lastWebhookTime is when the last webhook for this GitRepo came.
	// +optional
	LastWebhookTime metav1.Time `json:"lastWebhookTime,omitempty"`
	// pollingCommit is the commit the last poll found.
	// +optional
	PollingCommit string `json:"pollingCommit,omitempty"`
	// gitJobStatus is "Current" when the last sync succeeded, else what
	// failed (Fleet's name: there is no Job here).
	// +optional
	GitJobStatus string `json:"gitJobStatus,omitempty"`
	// lastSyncedImageScanTime is Fleet's (accepted, unused).
	// +optional
	LastSyncedImageScanTime metav1.Time `json:"lastSyncedImageScanTime,omitempty"`
	// lastPollingTriggered is when the repository was last polled.
	// +optional
	LastPollingTime metav1.Time `json:"lastPollingTriggered,omitempty"`
}

// StatusBase is the status a GitRepo folds from its Bundles and their
// BundleDeployments (Fleet's shape, shared with Fleet's HelmOp).
type StatusBase struct {
	// readyClusters is the number of clusters where every BundleDeployment
	// of the GitRepo is ready.
	// +optional
	ReadyClusters int `json:"readyClusters"`
	// desiredReadyClusters is the number of clusters with a
	// BundleDeployment of the GitRepo.
	// +optional
	DesiredReadyClusters int `json:"desiredReadyClusters"`
	// summary counts the BundleDeployments by state and names up to 10
	// that are not ready.
	// +optional
	Summary BundleSummary `json:"summary,omitempty"`
	// display holds short strings for kubectl.
	// +optional
	Display StatusDisplay `json:"display,omitempty"`
	// conditions: Ready, Accepted, Reconciling, Stalled.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// resources lists the resources of the Bundles and their state per
	// cluster. Bounded so the status stays below etcd's request limit: the
	// first 1000 resources by type and id (at most 256 KiB of them), and
	// 256 KiB of cluster names over all perClusterState lists (a resource
	// whose lists were cut has incompleteState).
	// +optional
	// +listType=atomic
	Resources []Resource `json:"resources,omitempty"`
	// resourceCounts counts the resources of every BundleDeployment by
	// state.
	// +optional
	ResourceCounts ResourceCounts `json:"resourceCounts,omitempty"`
	// perClusterResourceCounts counts them per cluster
	// ("<namespace>/<name>" of the Cluster), for at most 1000 clusters
	// (the first by name; resourceCounts still counts every one).
	// +optional
	PerClusterResourceCounts map[string]*ResourceCounts `json:"perClusterResourceCounts,omitempty"`
}

// StatusDisplay holds short strings for kubectl columns.
type StatusDisplay struct {
	// readyBundleDeployments is "ready/desired" BundleDeployments.
	// +optional
	ReadyBundleDeployments string `json:"readyBundleDeployments,omitempty"`
	// state is the worst BundleDeployment state, or GitUpdating while the
	// repository is being read.
	// +optional
	State string `json:"state,omitempty"`
	// message is the worst BundleDeployment's (or Bundle's) message.
	// +optional
	Message string `json:"message,omitempty"`
	// error is true when message is set.
	// +optional
	Error bool `json:"error,omitempty"`
}

// Resource is one resource of a GitRepo's Bundles and its state on each
// cluster.
type Resource struct {
	// +optional
	APIVersion string `json:"apiVersion,omitempty"`
	// +optional
	Kind string `json:"kind,omitempty"`
	// type is the lower-case kind prefixed by its API group ("configmap",
	// "apps.deployment").
	// +optional
	Type string `json:"type,omitempty"`
	// id is "<namespace>/<name>", or the name of a cluster-scoped resource.
	// +optional
	ID string `json:"id,omitempty"`
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// +optional
	Name string `json:"name,omitempty"`
	// incompleteState: a BundleDeployment's list of non-ready resources
	// was cut short, so this state may be incomplete.
	// +optional
	IncompleteState bool `json:"incompleteState,omitempty"`
	// state is the first state that is not Ready over the clusters, else
	// Ready.
	// +optional
	State string `json:"state,omitempty"`
	// error and transitioning are Fleet's (any cluster's).
	// +optional
	Error bool `json:"error,omitempty"`
	// +optional
	Transitioning bool `json:"transitioning,omitempty"`
	// message is the first message over the clusters.
	// +optional
	Message string `json:"message,omitempty"`
	// perClusterState lists the clusters ("<namespace>/<name>") by the
	// resource's state there.
	// +optional
	PerClusterState PerClusterState `json:"perClusterState,omitempty"`
}

// PerClusterState lists clusters by a resource's state there.
type PerClusterState struct {
	// +optional
	// +listType=atomic
	Ready []string `json:"ready,omitempty"`
	// +optional
	// +listType=atomic
	WaitApplied []string `json:"waitApplied,omitempty"`
	// +optional
	// +listType=atomic
	Pending []string `json:"pending,omitempty"`
	// +optional
	// +listType=atomic
	Modified []string `json:"modified,omitempty"`
	// +optional
	// +listType=atomic
	Orphaned []string `json:"orphaned,omitempty"`
	// +optional
	// +listType=atomic
	Missing []string `json:"missing,omitempty"`
	// +optional
	// +listType=atomic
	Unknown []string `json:"unknown,omitempty"`
	// +optional
	// +listType=atomic
	NotReady []string `json:"notReady,omitempty"`
}

// GetConditions returns the GitRepo's conditions.
func (in *GitRepo) GetConditions() []metav1.Condition { return in.Status.Conditions }

// SetConditions replaces the GitRepo's conditions.
func (in *GitRepo) SetConditions(c []metav1.Condition) { in.Status.Conditions = c }

func init() {
	SchemeBuilder.Register(&GitRepo{}, &GitRepoList{})
}
