package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Cluster is one downstream Kubernetes cluster. Manager-initiated clusters
// name a kubeconfig Secret the controller uses to push the agent;
// agent-initiated clusters are matched (or created) when an agent registers
// with the same clientID.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=fleet,shortName={fleetcluster,fc}
// +kubebuilder:printcolumn:name="Bundles-Ready",type=string,JSONPath=`.status.display.readyBundles`
// +kubebuilder:printcolumn:name="Nodes-Ready",type=string,JSONPath=`.status.display.readyNodes`
// +kubebuilder:printcolumn:name="Sample-Node",type=string,JSONPath=`.status.display.sampleNode`
// +kubebuilder:printcolumn:name="Last-Seen",type=date,JSONPath=`.status.agent.lastSeen`
// +kubebuilder:printcolumn:name="Connected",type=string,JSONPath=`.status.conditions[?(@.type=="Connected")].status`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Cluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec ClusterSpec `json:"spec,omitempty"`
	// +optional
	Status ClusterStatus `json:"status,omitempty"`
}

// ClusterList is a list of Clusters.
//
// +kubebuilder:object:root=true
type ClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Cluster `json:"items"`
}

// ClusterSpec is what the user wants for a downstream cluster and its agent.
//
// +kubebuilder:validation:XValidation:rule="!has(self.kubeConfigSecretNamespace) || size(self.kubeConfigSecretNamespace) == 0 || has(self.kubeConfigSecret)",message="kubeConfigSecretNamespace is set but kubeConfigSecret is not: name the kubeconfig Secret too"
type ClusterSpec struct {
	// paused stops changes to this cluster's BundleDeployments.
	// +optional
	Paused bool `json:"paused,omitempty"`

	// clientID identifies the cluster to the controller. An agent that
	// registers with this ID is matched to this Cluster. For manager-initiated
	// clusters the controller fills it with a random value when empty.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ClientID string `json:"clientID,omitempty"`

	// kubeConfigSecret is the name of a Secret holding a kubeconfig for the
	// downstream cluster under key "value" (Cluster API format). When set, the
	// controller deploys the agent itself (manager-initiated registration).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	KubeConfigSecret string `json:"kubeConfigSecret,omitempty"`

	// kubeConfigSecretNamespace is the namespace of kubeConfigSecret; empty
	// means the Cluster's own namespace. Allowed: the Cluster's namespace and
	// namespaces starting with "fleet-", "cattle-fleet-" or "cluster-".
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	KubeConfigSecretNamespace string `json:"kubeConfigSecretNamespace,omitempty"`

	// redeployAgentGeneration forces a redeploy of the agent when it differs
	// from status.agentDeployedGeneration. Bump it to restart (and, for
	// manager-initiated clusters, re-register) the agent.
	// +optional
	RedeployAgentGeneration int64 `json:"redeployAgentGeneration,omitempty"`

	// agentEnvVars are added to the agent container's environment.
	// +optional
	// +listType=atomic
	AgentEnvVars []corev1.EnvVar `json:"agentEnvVars,omitempty"`

	// agentNamespace is the downstream namespace of the agent; default
	// cattle-fleet-system.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	AgentNamespace string `json:"agentNamespace,omitempty"`

	// privateRepoURL prefixes the agent image, replacing the controller's
	// default registry.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	PrivateRepoURL string `json:"privateRepoURL,omitempty"`

	// templateValues are per-cluster values available to Bundle Helm values
	// templating.
	// +optional
	TemplateValues *GenericMap `json:"templateValues,omitempty"`

	// agentTolerations are appended to the agent's default tolerations.
	// +optional
	// +listType=atomic
	AgentTolerations []corev1.Toleration `json:"agentTolerations,omitempty"`

	// agentAffinity replaces the agent's default affinity.
	// +optional
	AgentAffinity *corev1.Affinity `json:"agentAffinity,omitempty"`

	// agentResources are set on every container of the agent pod.
	// +optional
	AgentResources *corev1.ResourceRequirements `json:"agentResources,omitempty"`

	// hostNetwork runs the agent on the host network; its Deployment then
	// uses the Recreate strategy.
	// +optional
	HostNetwork *bool `json:"hostNetwork,omitempty"`

	// agentSchedulingCustomization adds a PriorityClass and a
	// PodDisruptionBudget for the agent.
	// +optional
	AgentSchedulingCustomization *AgentSchedulingCustomization `json:"agentSchedulingCustomization,omitempty"`

	// agentPullSecrets are the image pull secrets of the agent pod.
	// +optional
	// +listType=atomic
	AgentPullSecrets []corev1.LocalObjectReference `json:"agentPullSecrets,omitempty"`

	// agentDirectEndpoint makes the agent serve an authorized cluster
	// endpoint: users reach the cluster's API directly, with a token
	// fleet-proxy issued them for this cluster and the same rights as
	// through the proxy, also while the upstream is down
	// (docs/operations.md, "Direct access").
	// +optional
	AgentDirectEndpoint *DirectEndpointSpec `json:"agentDirectEndpoint,omitempty"`
}

// DirectEndpointSpec is how a cluster's direct endpoint is served and
// reached.
type DirectEndpointSpec struct {
	// url is where users reach the endpoint: how the operator exposes
	// Service fleet-agent-direct (mode agent), or the downstream API
	// server's own URL (mode webhook). `fleet kubeconfig` writes it into
	// the context <cluster>-direct.
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^https://`
	URL string `json:"url"`
	// mode is agent (the agent serves the Kubernetes API itself, through
	// the same per-user impersonation as the proxy) or webhook (the
	// downstream API server calls the agent as its token webhook; the
	// operator sets its --authentication-token-webhook-config-file).
	// Default agent.
	// +optional
	// +kubebuilder:validation:Enum=agent;webhook
	Mode string `json:"mode,omitempty"`
	// serviceType of Service fleet-agent-direct: ClusterIP (default),
	// NodePort or LoadBalancer.
	// +optional
	// +kubebuilder:validation:Enum=ClusterIP;NodePort;LoadBalancer
	ServiceType string `json:"serviceType,omitempty"`
	// nodePort of the Service when serviceType is NodePort (0: chosen by
	// the cluster).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=65535
	NodePort int32 `json:"nodePort,omitempty"`
	// hostPort, when set, also publishes the endpoint on this port of the
	// agent's node (the container's hostPort: clusters without kube-proxy
	// or a load balancer; one agent replica per node).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=65535
	HostPort int32 `json:"hostPort,omitempty"`
	// hosts are more DNS names or IP addresses for the serving
	// certificate the agent makes (the url's host is always in it).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Hosts []string `json:"hosts,omitempty"`
	// apiAudiences (mode webhook) are the downstream API server's
	// audiences (its --api-audiences; by default its service account
	// issuer). The token webhook answers only TokenReviews for them, or
	// for none, so no other service that reviews tokens for its own
	// audience accepts a direct token. Empty: the agent asks its API
	// server.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=512
	// +kubebuilder:validation:items:Pattern=`^[^,\s]+$`
	APIAudiences []string `json:"apiAudiences,omitempty"`
}

// AgentSchedulingCustomization adds scheduling objects for the agent.
type AgentSchedulingCustomization struct {
	// priorityClass creates PriorityClass fleet-agent-priority-class and uses
	// it for the agent pod.
	// +optional
	PriorityClass *PriorityClassSpec `json:"priorityClass,omitempty"`
	// podDisruptionBudget creates PodDisruptionBudget
	// fleet-agent-pod-disruption-budget for the agent pods.
	// +optional
	PodDisruptionBudget *PodDisruptionBudgetSpec `json:"podDisruptionBudget,omitempty"`
}

// PriorityClassSpec is the agent's PriorityClass.
type PriorityClassSpec struct {
	// value is the priority of the agent pod.
	// +required
	// +kubebuilder:validation:Minimum=-1000000000
	// +kubebuilder:validation:Maximum=1000000000
	Value int32 `json:"value"`
	// preemptionPolicy is Never or PreemptLowerPriority (default).
	// +optional
	// +kubebuilder:validation:Enum=Never;PreemptLowerPriority
	PreemptionPolicy *corev1.PreemptionPolicy `json:"preemptionPolicy,omitempty"`
}

// PodDisruptionBudgetSpec is the agent's PodDisruptionBudget. Set at most one
// field.
//
// +kubebuilder:validation:XValidation:rule="!(has(self.minAvailable) && size(self.minAvailable) > 0 && self.minAvailable != '0' && has(self.maxUnavailable) && size(self.maxUnavailable) > 0 && self.maxUnavailable != '0')",message="set either minAvailable or maxUnavailable, not both"
type PodDisruptionBudgetSpec struct {
	// minAvailable is a number or a percentage.
	// +optional
	// +kubebuilder:validation:Pattern=`^([0-9]+|[0-9]+%)$`
	MinAvailable string `json:"minAvailable,omitempty"`
	// maxUnavailable is a number or a percentage.
	// +optional
	// +kubebuilder:validation:Pattern=`^([0-9]+|[0-9]+%)$`
	MaxUnavailable string `json:"maxUnavailable,omitempty"`
}

// ClusterStatus is what the controller and the agent observed.
type ClusterStatus struct {
	// conditions: Ready, Reconciling, Stalled, Imported, Registered,
	// AgentReady (the controller) and Connected (fleet-proxy: whether the
	// agent's tunnel for cluster access is up).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// observedGeneration is the last spec generation fully acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// namespace is the per-cluster namespace upstream that holds this
	// cluster's BundleDeployments and request identity.
	// +optional
	Namespace string `json:"namespace,omitempty"`

	// agentDeployedGeneration is the redeployAgentGeneration the agent was
	// last deployed with.
	// +optional
	AgentDeployedGeneration *int64 `json:"agentDeployedGeneration,omitempty"`

	// agentConfigChanged is true when a setting given to the agent changed
	// since the last deploy and a redeploy is due.
	// +optional
	AgentConfigChanged bool `json:"agentConfigChanged,omitempty"`

	// apiServerURL is the upstream URL given to the deployed agent.
	// +optional
	APIServerURL string `json:"apiServerURL,omitempty"`
	// apiServerCAHash is the hash of the upstream CA given to the agent.
	// +optional
	APIServerCAHash string `json:"apiServerCAHash,omitempty"`
	// agentTLSMode is the TLS mode given to the agent: strict or system-store.
	// +optional
	AgentTLSMode string `json:"agentTLSMode,omitempty"`

	// Hashes of the agent settings the agent was last deployed with.
	// +optional
	AgentEnvVarsHash string `json:"agentEnvVarsHash,omitempty"`
	// +optional
	AgentPrivateRepoURL string `json:"agentPrivateRepoURL,omitempty"`
	// +optional
	AgentHostNetwork bool `json:"agentHostNetwork,omitempty"`
	// +optional
	AgentAffinityHash string `json:"agentAffinityHash,omitempty"`
	// +optional
	AgentResourcesHash string `json:"agentResourcesHash,omitempty"`
	// +optional
	AgentTolerationsHash string `json:"agentTolerationsHash,omitempty"`
	// +optional
	AgentSchedulingCustomizationHash string `json:"agentSchedulingCustomizationHash,omitempty"`
	// agentValuesHash is the hash of all values the agent chart was rendered
	// with (credentials excluded) and of the agent chart itself, so it also
	// changes when a controller upgrade ships a different agent chart.
	// +optional
	AgentValuesHash string `json:"agentValuesHash,omitempty"`
	// kubeConfigServerHash identifies the downstream API server (URL and CA)
	// the agent was deployed through. It changes when the kubeconfig Secret
	// points at another server, not when its credentials rotate.
	// +optional
	KubeConfigServerHash string `json:"kubeConfigServerHash,omitempty"`

	// agent is what the agent reports about itself.
	// +optional
	Agent AgentStatus `json:"agent,omitempty"`

	// summary counts this cluster's BundleDeployments by state.
	// +optional
	Summary BundleSummary `json:"summary,omitempty"`

	// display holds short strings for kubectl.
	// +optional
	Display ClusterDisplay `json:"display,omitempty"`
}

// AgentStatus is what the agent reports in its heartbeat.
type AgentStatus struct {
	// lastSeen is the time of the agent's last heartbeat.
	// +optional
	LastSeen metav1.Time `json:"lastSeen,omitempty"`
	// namespace is the downstream namespace of the agent. For an
	// agent-initiated cluster, the agent's Bundle is applied there.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace,omitempty"`
	// version is the agent's version.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Version string `json:"version,omitempty"`
	// kubernetesVersion is the downstream API server's version.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
	// nodeCount and readyNodeCount count the downstream nodes.
	// +optional
	// +kubebuilder:validation:Minimum=0
	NodeCount int32 `json:"nodeCount,omitempty"`
	// +optional
	// +kubebuilder:validation:Minimum=0
	ReadyNodeCount int32 `json:"readyNodeCount,omitempty"`
	// sampleNode is the name of one downstream node.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	SampleNode string `json:"sampleNode,omitempty"`
	// generation is the redeployAgentGeneration of the running agent.
	// +optional
	Generation *int64 `json:"generation,omitempty"`
	// heartbeatIntervalSeconds is how often the agent reports.
	// +optional
	// +kubebuilder:validation:Minimum=0
	HeartbeatIntervalSeconds int32 `json:"heartbeatIntervalSeconds,omitempty"`
	// directEndpointCA is the PEM CA certificate of the agent's direct
	// endpoint (spec.agentDirectEndpoint), as the agent reports it.
	// +optional
	// +kubebuilder:validation:MaxLength=16384
	DirectEndpointCA string `json:"directEndpointCA,omitempty"`
	// directEndpointCertificateNames are the names (DNS, then IP) the
	// direct endpoint's serving certificate is valid for, as the agent
	// reports them (mode agent); the controller checks that they cover
	// the url's host (condition DirectEndpoint).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	DirectEndpointCertificateNames []string `json:"directEndpointCertificateNames,omitempty"`
	// identityPublicKey is the agent's identity key (Ed25519, base64), as
	// the agent reports it. For a Cluster without annotation
	// fleet.cattle.io/agent-identity-key (registered before agents had
	// one) the controller records it there.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	IdentityPublicKey string `json:"identityPublicKey,omitempty"`
}

// ClusterDisplay holds short strings for kubectl columns.
type ClusterDisplay struct {
	// readyBundles is "ready/desired" BundleDeployments.
	// +optional
	ReadyBundles string `json:"readyBundles,omitempty"`
	// readyNodes is "ready/total" downstream nodes.
	// +optional
	ReadyNodes string `json:"readyNodes,omitempty"`
	// sampleNode is one downstream node's name.
	// +optional
	SampleNode string `json:"sampleNode,omitempty"`
	// state is the worst BundleDeployment state, WaitCheckIn before the
	// first heartbeat, or Offline.
	// +optional
	State string `json:"state,omitempty"`
}

func init() {
	SchemeBuilder.Register(&Cluster{}, &ClusterList{})
}
