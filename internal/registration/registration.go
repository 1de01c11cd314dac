// Package registration is the contract of the identity handshake between the
// agent and the controller (shared/SPEC.md §4): the names, keys and labels
// both sides use, each defined here once. The agent creates a
// ClusterRegistration with the import identity of a ClusterRegistrationToken;
// the controller answers with a credential Secret c-<hash> in the system
// registration namespace that only the registering identity may read; the
// agent copies it into its local fleet-agent Secret and forgets the import
// token.
//
// The agent chart (charts/fleet-agent) writes the downstream side of the
// contract (the bootstrap Secret, the agent ConfigMap); a renderer test
// checks that what it renders is what these names and types read. The labels
// and annotations users and admission policies see on API objects
// (fleet.RegistrationTokenLabel, fleet.CreatedByAgentPodLabel,
// fleet.ApprovedAnnotation) are part of the API and live with it in
// api/v1alpha1.
package registration

import (
	"time"

	"github.com/gitops-fleet/fleet/internal/names"
)

// Names of the agent's objects downstream (shared/SPEC.md §2).
const (
	// AgentCredentialSecretName is the agent's local Secret holding its
	// request credential. The agent writes it after registering; the
	// controller deletes it before it pushes a fresh bootstrap Secret, so
	// the agent registers again.
	AgentCredentialSecretName = "fleet-agent"
	// BootstrapSecretName is the local Secret holding the import credential
	// (keys BootstrapKey*), rendered by the agent chart and deleted by the
	// agent once it registered.
	BootstrapSecretName = "fleet-agent-bootstrap"
	// AgentConfigMapName is the local ConfigMap of the agent's settings; its
	// key AgentConfigKey holds an AgentConfig as JSON.
	AgentConfigMapName = "fleet-agent"
	AgentConfigKey     = "config"
)

// TokenValuesKey is the key of a ClusterRegistrationToken's values Secret
// (named like the token) that holds the values file for
// `helm install fleet-agent charts/fleet-agent -f values.yaml`.
const TokenValuesKey = "values"

// AgentConfig is the document under AgentConfigKey of the agent's ConfigMap,
// as the agent chart writes it from its values of the same names.
type AgentConfig struct {
	Labels          map[string]string `json:"labels,omitempty"`
	ClientID        string            `json:"clientID,omitempty"`
	AgentTLSMode    string            `json:"agentTLSMode,omitempty"`
	CheckinInterval string            `json:"checkinInterval,omitempty"`
}

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
	KeyAgentTLSMode = "agentTLSMode" // the TLS mode the agent registered with
	KeyIssued       = "issued"       // RFC 3339 time the token was issued

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

// ProxyAPIGroup is the aggregated API of cluster access (fleet-proxy,
// docs/design/cluster-access.md). The grant gives a request identity get on
// clusters/attach of its own Cluster in it: the agent's tunnel.
const ProxyAPIGroup = "proxy.fleet.cattle.io"

// RequestIdentityClusterRole (kustomize/base/rbac) is what a request
// identity may do in its cluster namespace, bound there by one RoleBinding.
const RequestIdentityClusterRole = "fleet-request-identity"

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
