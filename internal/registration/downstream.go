package registration

// What an agent makes downstream at runtime besides its credential and
// identity Secrets, named once here: the agent makes them, and the
// controller (removing an agent it pushed, when its Cluster is deleted) and
// `fleet uninstall agent` remove them, where the chart's objects are long
// gone.
const (
	// InventoryLabel marks the agent's inventory ConfigMaps (one per
	// BundleDeployment), in the agent's namespace.
	InventoryLabel = "fleet.cattle.io/inventory"
	// DirectLabel marks the Secret and ConfigMap the agent made for its
	// direct endpoint (certificate, state), in the agent's namespace. An
	// operator's certificate Secret of the same name carries no label and
	// is never deleted.
	DirectLabel = "fleet.cattle.io/agent-direct"
	// ImpersonationNamespace holds the impersonators of cluster access.
	ImpersonationNamespace = "cattle-impersonation-system"
	// ImpersonatorLabel marks the impersonator objects (value "true"): their
	// namespace, ServiceAccounts, ClusterRoles and ClusterRoleBindings.
	ImpersonatorLabel = "fleet.cattle.io/impersonator"
)
