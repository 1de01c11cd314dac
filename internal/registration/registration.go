// Package registration is the contract of the identity handshake between the
// agent and the controller (shared/SPEC.md §4): the names, keys and labels
// both sides use. The agent creates a ClusterRegistration with the import
// identity of a ClusterRegistrationToken; the controller answers with a
// credential Secret c-<hash> in the system registration namespace that only
// the registering identity may read; the agent copies it into its local
// fleet-agent Secret and forgets the import token.
package registration

import (
	"time"

	"github.com/gitops-fleet/fleet/internal/names"
)

const (
	// CredentialSecretType is the type of the c-<hash> Secret.
	CredentialSecretType = "fleet.cattle.io/agent-credential"

	// Keys of the c-<hash> Secret, also kept in the agent's local
	// fleet-agent Secret.
	KeyToken               = "token"               // bearer token of the request identity
	KeyClusterNamespace    = "clusterNamespace"    // workspace of the Cluster (and the registration)
	KeyClusterName         = "clusterName"         // the Cluster's name
	KeyDeploymentNamespace = "deploymentNamespace" // per-cluster namespace (BundleDeployments)
	KeyServiceAccount      = "serviceAccountName"  // request ServiceAccount, in deploymentNamespace
	KeyExpires             = "expires"             // RFC 3339 expiry of the token

	// Extra keys of the local fleet-agent Secret.
	KeyKubeconfig   = "kubeconfig"
	KeyAPIServerURL = "apiServerURL"
	KeyAPIServerCA  = "apiServerCA"

	// BootstrapSecretName is the agent's local Secret holding the import
	// credential (made by the agent chart, deleted by the agent once it has
	// its own credential).
	BootstrapSecretName = "fleet-agent-bootstrap"

	// Keys of the local fleet-agent-bootstrap Secret (the agent chart's).
	BootstrapKeyAPIServerURL                = "apiServerURL"
	BootstrapKeyAPIServerCA                 = "apiServerCA"
	BootstrapKeyClusterNamespace            = "clusterNamespace"
	BootstrapKeySystemRegistrationNamespace = "systemRegistrationNamespace"
	BootstrapKeyToken                       = "token"
	BootstrapKeyTokenName                   = "tokenName"

	// RegistrationLabel and RegistrationNamespaceLabel mark every object the
	// controller makes for one ClusterRegistration, so they can be found and
	// removed with it (they live in several namespaces, out of reach of
	// ownerReferences).
	RegistrationLabel          = "fleet.cattle.io/cluster-registration"
	RegistrationNamespaceLabel = "fleet.cattle.io/cluster-registration-namespace"

	// RequestedAtAnnotation is set by the agent on its ClusterRegistration:
	// when it asked, to the nanosecond. Creation timestamps have one-second
	// resolution; this orders an agent's requests made within one second
	// (a restart right after a request).
	RequestedAtAnnotation = "fleet.cattle.io/requested-at"

	// RegistrationFinalizer lets the controller remove those objects.
	RegistrationFinalizer = "fleet.cattle.io/cluster-registration"

	// CredentialPickupTimeout: a credential Secret not picked up by then is
	// removed (the agent has copied it long before).
	CredentialPickupTimeout = 15 * time.Minute
)

// ImportServiceAccountName is the ServiceAccount of a ClusterRegistrationToken.
// It is "import-<token>" exactly (no shortening), so the admission policy
// can tie the registering user to the token label it claims.
func ImportServiceAccountName(token string) string { return "import-" + token }

// CredentialSecretName is the name of the credential Secret for one attempt.
func CredentialSecretName(clientID, clientRandom string) string {
	return names.CredentialSecret(clientID, clientRandom)
}

// RequestServiceAccountName is the request identity of a registration, in
// the cluster namespace.
func RequestServiceAccountName(registration string) string {
	return names.SafeConcatName("request", registration)
}
