package registration

// The phases of a grant (Reconciler.phases), in order; their names appear
// in logs. A pass interrupted anywhere, by a restart of the controller
// after any of its writes, is finished by the next one (shared/SPEC.md §4:
// a restart at any step converges; restart_test.go kills the controller
// after each write a grant makes, counted on its connection).
const (
	// stepCluster: the Cluster of the clientID was found or created.
	stepCluster = "cluster"
	// stepFinalizer: the registration carries the controller's finalizer
	// (a write only when the agent did not set it).
	stepFinalizer = "finalizer"
	// stepNamespace: the cluster namespace and the system registration
	// namespace exist.
	stepNamespace = "namespace"
	// stepCredentialAccess: the import identity may read the credential
	// Secret (registrations made with a token only).
	stepCredentialAccess = "credential-access"
	// stepRequestIdentity: the request ServiceAccount and its Roles and
	// RoleBindings exist.
	stepRequestIdentity = "request-identity"
	// stepSuperseded: older registrations of the clientID were deleted.
	stepSuperseded = "superseded"
	// stepCredentialSecret: the credential was minted (TokenRequest) and
	// sealed for the status, or written into the credential Secret c-<hash>.
	stepCredentialSecret = "credential-secret"
)
