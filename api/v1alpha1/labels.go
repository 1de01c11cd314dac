package v1alpha1

// Labels, annotations and finalizers set on objects the controller and agent
// manage. Their values are part of the observable contract with Fleet.
const (
	// ManagedLabel marks every object the controller generated, so orphan
	// cleanup can find them.
	ManagedLabel = "fleet.cattle.io/managed"

	// ClusterNamespaceAnnotation and ClusterAnnotation point from a
	// per-cluster namespace (and from BundleDeployments) back to its Cluster.
	ClusterNamespaceAnnotation = "fleet.cattle.io/cluster-namespace"
	ClusterAnnotation          = "fleet.cattle.io/cluster"

	// ClusterNamespaceLabel and ClusterLabel carry the same as labels, so
	// objects can be listed by the cluster they belong to.
	ClusterNamespaceLabel = "fleet.cattle.io/cluster-namespace"
	ClusterLabel          = "fleet.cattle.io/cluster"

	// ClusterRegistrationAnnotation and ClusterRegistrationNamespaceAnnotation
	// point from a request ServiceAccount to the registration that made it.
	ClusterRegistrationAnnotation          = "fleet.cattle.io/cluster-registration"
	ClusterRegistrationNamespaceAnnotation = "fleet.cattle.io/cluster-registration-namespace"

	// RegistrationTokenLabel is set by the agent on its ClusterRegistration:
	// the name of the token it registered with.
	RegistrationTokenLabel = "fleet.cattle.io/registration-token"

	// ApprovedAnnotation with value "true" approves a ClusterRegistration
	// made through a token with spec.approval Manual. An admission policy
	// lets only users allowed the "approve" verb on clusterregistrations
	// set or change it.
	ApprovedAnnotation = "fleet.cattle.io/approved"

	// RecoveryNamespaceLabel is set on a ClusterRegistration made with a
	// cluster's recovery identity (ServiceAccount fleet-agent-recovery in
	// the cluster namespace): that cluster namespace. An admission policy
	// lets only that identity set it, requires it from that identity, and
	// keeps it from changing.
	RecoveryNamespaceLabel = "fleet.cattle.io/recovery-namespace"

	// AgentIdentityKeyAnnotation on a Cluster records the identity public
	// key (Ed25519, base64) of the agent the Cluster was granted to: set by
	// the grant, or, for a Cluster registered before agents had a key, from
	// the agent's heartbeat (status.agent.identityPublicKey). A
	// re-registration through a token not bound to the Cluster's clientID,
	// or through the recovery identity, must be signed with it.
	AgentIdentityKeyAnnotation = "fleet.cattle.io/agent-identity-key"

	// CreatedByAgentPodLabel is the only fleet.cattle.io/ label an agent may
	// assert on its Cluster.
	CreatedByAgentPodLabel = "fleet.cattle.io/created-by-agent-pod"

	// BundleLabel and BundleNamespaceLabel point from a BundleDeployment back
	// to its Bundle.
	BundleLabel          = "fleet.cattle.io/bundle-name"
	BundleNamespaceLabel = "fleet.cattle.io/bundle-namespace"

	// AgentBundleLabel with value "true" marks a Cluster's agent Bundle
	// fleet-agent-<cluster> and its BundleDeployment; the agent's deployer
	// recognises its own Bundle by it (and the cluster labels). Only the
	// controller sets it: the Bundle reconciler passes it on to the
	// BundleDeployment only for the agent Bundle it made for that Cluster
	// (named for it, controlled by it), and ignores it on any other Bundle.
	AgentBundleLabel = "fleet.cattle.io/agent-bundle"

	// ShardLabel assigns a Cluster (and what is made for it) to a controller
	// shard.
	ShardLabel = "fleet.cattle.io/shard-id"

	// CAPIClusterLabel marks a Cluster made by Cluster API auto-registration;
	// its value is the name of the cluster.x-k8s.io Cluster it stands for. A
	// Cluster without it is never changed by auto-registration.
	CAPIClusterLabel = "fleet.cattle.io/capi-cluster"
	// CAPILabelsAnnotation lists (comma-separated) the label keys
	// auto-registration copied from the CAPI cluster, so it removes only
	// those when they leave the CAPI cluster.
	CAPILabelsAnnotation = "fleet.cattle.io/capi-labels"

	// ClusterFinalizer lets the controller remove what it made for a Cluster
	// before the Cluster goes.
	ClusterFinalizer = "fleet.cattle.io/cluster-finalizer"

	// BundleFinalizer lets the controller remove BundleDeployments of a Bundle
	// before the Bundle goes.
	BundleFinalizer = "fleet.cattle.io/bundle-finalizer"
)

// Reserved label prefixes that an agent may not set on its Cluster.
var ReservedLabelPrefixes = []string{"fleet.cattle.io/", "management.cattle.io/"}
