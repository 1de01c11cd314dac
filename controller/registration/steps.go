package registration

// The externally visible steps of a grant, in order: the names of its
// phases (Reconciler.phases), of the minting of a token within the last
// one, and of the status write after them. A test hook can stop the
// controller after any of them to prove that a pass interrupted there is
// finished by the next process (shared/SPEC.md §4: a restart at any step
// converges).
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
	// stepToken: a request token was minted (TokenRequest), not yet written
	// anywhere (only when no reusable token was found).
	stepToken = "token"
	// stepCredentialSecret: the credential Secret c-<hash> was written.
	stepCredentialSecret = "credential-secret"
	// stepStatus: the registration's status says granted.
	stepStatus = "status"
)
