package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// Condition types. Ready, Reconciling and Stalled follow kstatus so generic
// tools (kubectl wait, flux, kstatus) understand them; the others name one
// step of registration or deployment.
const (
	ReadyCondition       = "Ready"
	ReconcilingCondition = "Reconciling"
	StalledCondition     = "Stalled"

	// ImportedCondition: the controller pushed the agent to a
	// manager-initiated cluster.
	ImportedCondition = "Imported"
	// AgentRolloutCondition (False only): a staged agent rollout holds the
	// Cluster's agent back until its wave (reason WaitingForRolloutWave) or
	// put it back on the previous revision (reason RolledBack). Absent
	// while the agent is on the current revision.
	AgentRolloutCondition = "AgentRollout"
	// DirectEndpointCondition (False only): the serving certificate of the
	// Cluster's direct endpoint does not cover the host of
	// spec.agentDirectEndpoint.url (reason
	// DirectCertificateHostMismatch), so kubectl's direct context fails
	// TLS. Absent while it covers it, or before the agent reported it.
	DirectEndpointCondition = "DirectEndpoint"
	// GrantedCondition: a ClusterRegistration was granted a credential.
	GrantedCondition = "Granted"
	// DeployedCondition: a BundleDeployment's manifests were applied.
	DeployedCondition = "Deployed"
	// MonitoredCondition: the agent reports health and drift of a
	// BundleDeployment.
	MonitoredCondition = "Monitored"
	// ConnectedCondition: a Cluster's agent holds a tunnel to fleet-proxy
	// (cluster access). Written by fleet-proxy alone, by server-side apply
	// under field manager fleet-proxy; the controller keeps it.
	ConnectedCondition = "Connected"
)

// DirectCertificateHostMismatchReason (DirectEndpoint): the direct endpoint's
// certificate does not cover the url's host; the message names the host and
// the certificate's names.
const DirectCertificateHostMismatchReason = "DirectCertificateHostMismatch"

// Reasons of the Connected condition.
const (
	// TunnelUpReason: a fleet-proxy replica holds the agent's tunnel; the
	// message names the replica.
	TunnelUpReason = "TunnelUp"
	// TunnelDownReason: no replica holds it; the message says since when
	// and what to check.
	TunnelDownReason = "TunnelDown"
)

// Condition reasons shared by the controller and agent.
const (
	SucceededReason   = "Succeeded"
	ProgressingReason = "Progressing"
	WaitingReason     = "Waiting"

	KubeConfigSecretMissingReason = "KubeConfigSecretMissing"
	KubeConfigKeyMissingReason    = "KubeConfigKeyMissing"
	KubeConfigInvalidReason       = "KubeConfigInvalid"
	// KubeConfigUnsafeReason: the kubeconfig would make the controller use
	// more than the credentials in it (a file, a program, a proxy, no TLS
	// check); the message names the field.
	KubeConfigUnsafeReason = "KubeConfigUnsafe"
	// APIServerURLInsecureReason: agents would be told a plain http
	// upstream URL, which the controller configuration does not allow.
	APIServerURLInsecureReason = "APIServerURLInsecure"
	// NamespaceConflictReason: the per-cluster namespace exists and was
	// made for another Cluster.
	NamespaceConflictReason         = "NamespaceConflict"
	NamespaceNotAllowedReason       = "NamespaceNotAllowed"
	DownstreamUnreachableReason     = "DownstreamUnreachable"
	DownstreamTLSErrorReason        = "DownstreamTLSError"
	DownstreamUnauthorizedReason    = "DownstreamUnauthorized"
	DownstreamForbiddenReason       = "DownstreamForbidden"
	ApplyConflictReason             = "ApplyConflict"
	ApplyFailedReason               = "ApplyFailed"
	RenderFailedReason              = "RenderFailed"
	ConfigInvalidReason             = "ConfigInvalid"
	MissingAPIServerURLReason       = "MissingAPIServerURL"
	WaitingForRegistrationReason    = "WaitingForRegistration"
	WaitingForTokenReason           = "WaitingForToken"
	OfflineReason                   = "Offline"
	AgentHeartbeatReason            = "AgentHeartbeat"
	PausedReason                    = "Paused"
	TokenExpiredReason              = "TokenExpired"
	TokenNotFoundReason             = "TokenNotFound"
	ClientIDNotAllowedReason        = "ClientIDNotAllowed"
	SupersededReason                = "Superseded"
	GrantedReason                   = "Granted"
	NoBootstrapCredentialReason     = "NoBootstrapCredential"
	CredentialRejectedReason        = "CredentialRejected"
	BundleDeploymentsNotReadyReason = "BundleDeploymentsNotReady"
	TargetsInvalidReason            = "TargetsInvalid"
	ModifiedReason                  = "Modified"
	NotReadyReason                  = "NotReady"
	// UnsupportedOptionReason: the Bundle sets an option fleet does not do
	// yet (internal/bundleoptions); it is not deployed.
	UnsupportedOptionReason = "UnsupportedOption"
	// WaitingForContentsReason: a Bundle's spec.contentsId names contents
	// whose index or a chunk does not exist (yet) in its namespace.
	WaitingForContentsReason = "WaitingForContents"
	// ContentsInvalidReason: a Bundle's contents are not what its
	// spec.contentsId names (a changed chunk, a malformed index); the
	// message names the Secret.
	ContentsInvalidReason = "ContentsInvalid"
	// WaitingForValuesReason: a Bundle's spec.valuesHash names Helm values
	// whose Secret (named like the Bundle) does not exist yet or holds
	// other values than the hash says (fleet apply writes the Secret, then
	// the Bundle).
	WaitingForValuesReason = "WaitingForValues"
	// ValuesSecretInvalidReason: the Secret named like a Bundle with
	// spec.valuesHash is not a values Secret (its type), or its values are
	// not YAML maps; the message names the Secret and the key.
	ValuesSecretInvalidReason = "ValuesSecretInvalid"

	// ClusterRegistration reasons of the trust boundary between a token
	// holder and the clusters of a workspace.
	// ClusterAlreadyRegisteredReason: a token not bound to the clientID may
	// not take over a Cluster whose agent checks in. Set by earlier
	// releases (ReregistrationRefusedReason replaces it); registrations
	// refused so stay refused.
	ClusterAlreadyRegisteredReason = "ClusterAlreadyRegistered"
	// ReregistrationRefusedReason: the registration would register an
	// existing Cluster again, and none of what allows that holds (a token
	// bound to its clientID, a signature by the key recorded on the
	// Cluster, an approval). Final.
	ReregistrationRefusedReason = "ReregistrationRefused"
	// RecoveryRefusedReason: a registration made with a cluster's recovery
	// identity does not match that cluster (its namespace, clientID or
	// recorded key). Final.
	RecoveryRefusedReason = "RecoveryRefused"
	// PendingApprovalReason: the token asks for manual approval and the
	// registration has none yet.
	PendingApprovalReason = "PendingApproval"
	// TokenLimitReachedReason: the token's maxClusters clusters are
	// registered already.
	TokenLimitReachedReason = "TokenLimitReached"
	// AdmissionPoliciesMissingReason: fleet's admission policies or their
	// bindings are not installed as shipped, so the controller grants
	// nothing.
	AdmissionPoliciesMissingReason = "AdmissionPoliciesMissing"

	// BundleDeployment reasons reported by the agent's deployer.
	// WaitingForContentReason: the content Secret is missing or holds other
	// manifests than spec.deploymentID names.
	WaitingForContentReason = "WaitingForContent"
	// ContentInvalidReason: the content Secret cannot be read.
	ContentInvalidReason = "ContentInvalid"
	// HealthTimeoutReason: resources were not ready within the health
	// timeout after the apply.
	HealthTimeoutReason = "HealthTimeout"
	// MonitorFailedReason: health or drift could not be checked.
	MonitorFailedReason = "MonitorFailed"
	// DriftCorrectedReason: drift was found and reverted.
	DriftCorrectedReason = "DriftCorrected"
	// ServiceAccountMissingReason: options.serviceAccount names a
	// ServiceAccount that does not exist in the agent's namespace
	// downstream; nothing was applied.
	ServiceAccountMissingReason = "ServiceAccountMissing"
	// ForbiddenReason: the downstream API server refused the
	// options.serviceAccount an object of the bundle; nothing was applied.
	ForbiddenReason = "Forbidden"
	// ClusterMismatchReason: the BundleDeployment's cluster labels name
	// another cluster than the agent's own; nothing was applied or pruned.
	ClusterMismatchReason = "ClusterMismatch"
	// WaitingForDependencyReason: a Bundle of spec.dependsOn is not in an
	// accepted state on this cluster (or not deployed to it); nothing of
	// the new deployment was applied. The BundleDeployment's state is
	// WaitApplied.
	WaitingForDependencyReason = "WaitingForDependency"
	// DependencyCycleReason: spec.dependsOn leads back to the
	// BundleDeployment itself while it waits, so it would wait forever;
	// nothing was applied until the cycle is broken.
	DependencyCycleReason = "DependencyCycle"

	// Bundle reasons for content the controller refuses to render (Stalled).
	// BundleTooLargeReason: the resources decode, or the manifests render,
	// to more than the configured limits.
	BundleTooLargeReason = "BundleTooLarge"
	// RemoteResourceRefusedReason: a kustomize overlay names a URL, a git
	// repository or a Helm chart to fetch; Bundles may only use their own
	// files.
	RemoteResourceRefusedReason = "RemoteResourceRefused"
	// RenderTimeoutReason: rendering did not finish within the time limit.
	RenderTimeoutReason = "RenderTimeout"
	// RenderOutOfMemoryReason: rendering needed more memory than the limit.
	RenderOutOfMemoryReason = "RenderOutOfMemory"
	// RendererUnavailableReason: the renderer service (fleet-renderer) did
	// not render; the Bundle is not at fault and is retried.
	RendererUnavailableReason = "RendererUnavailable"
)

// GetConditions and SetConditions let generic code (the kstatus rules of
// internal/reconciler, fluxcd/pkg/runtime/conditions) read and write the
// conditions of every kind that has them.

// GetConditions returns the Cluster's conditions.
func (in *Cluster) GetConditions() []metav1.Condition { return in.Status.Conditions }

// SetConditions replaces the Cluster's conditions.
func (in *Cluster) SetConditions(c []metav1.Condition) { in.Status.Conditions = c }

// GetConditions returns the ClusterGroup's conditions.
func (in *ClusterGroup) GetConditions() []metav1.Condition { return in.Status.Conditions }

// SetConditions replaces the ClusterGroup's conditions.
func (in *ClusterGroup) SetConditions(c []metav1.Condition) { in.Status.Conditions = c }

// GetConditions returns the ClusterRegistration's conditions.
func (in *ClusterRegistration) GetConditions() []metav1.Condition { return in.Status.Conditions }

// SetConditions replaces the ClusterRegistration's conditions.
func (in *ClusterRegistration) SetConditions(c []metav1.Condition) { in.Status.Conditions = c }

// GetConditions returns the ClusterRegistrationToken's conditions.
func (in *ClusterRegistrationToken) GetConditions() []metav1.Condition {
	return in.Status.Conditions
}

// SetConditions replaces the ClusterRegistrationToken's conditions.
func (in *ClusterRegistrationToken) SetConditions(c []metav1.Condition) {
	in.Status.Conditions = c
}

// GetConditions returns the Bundle's conditions.
func (in *Bundle) GetConditions() []metav1.Condition { return in.Status.Conditions }

// SetConditions replaces the Bundle's conditions.
func (in *Bundle) SetConditions(c []metav1.Condition) { in.Status.Conditions = c }

// GetConditions returns the BundleDeployment's conditions.
func (in *BundleDeployment) GetConditions() []metav1.Condition { return in.Status.Conditions }

// SetConditions replaces the BundleDeployment's conditions.
func (in *BundleDeployment) SetConditions(c []metav1.Condition) { in.Status.Conditions = c }

// GetConditions returns the AgentRollout's conditions.
func (in *AgentRollout) GetConditions() []metav1.Condition { return in.Status.Conditions }

// SetConditions replaces the AgentRollout's conditions.
func (in *AgentRollout) SetConditions(c []metav1.Condition) { in.Status.Conditions = c }

// Reasons of the agent's faults that are not its credential's: it keeps its
// credential and tries again.
const (
	// DownstreamAPIUnreachableReason: the agent cannot reach the API
	// server of the cluster it runs in (refused, timeout, DNS, TLS).
	DownstreamAPIUnreachableReason = "DownstreamAPIUnreachable"
	// UpstreamUnreachableReason: the agent cannot reach the upstream API
	// server (refused, timeout, DNS, TLS).
	UpstreamUnreachableReason = "UpstreamUnreachable"
)

// Reasons of a Bundle's Ready condition during a partitioned rollout.
const (
	// PartitionUnavailableReason: a Bundle's rollout waits at a partition
	// with more unavailable clusters than it allows; later partitions keep
	// their previous deployment.
	PartitionUnavailableReason = "PartitionUnavailable"
	// RolloutStrategyInvalidReason: a Bundle's rolloutStrategy cannot be
	// applied (a limit that is neither a number nor a percentage, an
	// invalid partition selector); nothing moves until it is fixed.
	RolloutStrategyInvalidReason = "RolloutStrategyInvalid"
)
