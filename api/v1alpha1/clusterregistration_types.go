package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ClusterRegistration is an agent's request to register its cluster, made with
// the import identity of a ClusterRegistrationToken. The controller answers by
// writing a credential Secret named c-<hash> in the system registration
// namespace, sealed to spec.credentialPublicKey. A registration through a token with spec.approval Manual waits
// (Granted=False, reason PendingApproval) for annotation
// fleet.cattle.io/approved: "true", which only users allowed the "approve"
// verb on clusterregistrations may set (admission policy).
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=fleet,shortName=creg
// +kubebuilder:printcolumn:name="Cluster-Name",type=string,JSONPath=`.status.clusterName`
// +kubebuilder:printcolumn:name="Granted",type=boolean,JSONPath=`.status.granted`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Granted")].reason`
// +kubebuilder:printcolumn:name="Labels",type=string,JSONPath=`.spec.clusterLabels`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ClusterRegistration struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec ClusterRegistrationSpec `json:"spec,omitempty"`
	// +optional
	Status ClusterRegistrationStatus `json:"status,omitempty"`
}

// ClusterRegistrationList is a list of ClusterRegistrations.
//
// +kubebuilder:object:root=true
type ClusterRegistrationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterRegistration `json:"items"`
}

// ClusterRegistrationSpec is what the agent asserts about itself.
//
// +kubebuilder:validation:XValidation:rule="has(self.identitySignature) == has(self.identityPublicKey)",message="identityPublicKey and identitySignature go together: set both (a signed registration) or neither"
type ClusterRegistrationSpec struct {
	// clientID identifies the cluster: the configured client ID or the UID of
	// the downstream kube-system namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	ClientID string `json:"clientID"`
	// clientRandom is a random value the agent made for this attempt; with
	// clientID it names the credential Secret.
	// +required
	// +kubebuilder:validation:MinLength=16
	// +kubebuilder:validation:MaxLength=128
	ClientRandom string `json:"clientRandom"`
	// clusterLabels are copied to a Cluster the controller creates for this
	// registration (labels under fleet.cattle.io/ and management.cattle.io/
	// are dropped).
	// +optional
	ClusterLabels map[string]string `json:"clusterLabels,omitempty"`
	// credentialPublicKey is the agent's public key for this attempt (HPKE,
	// DHKEM(X25519, HKDF-SHA256), base64). The controller seals the
	// credential to it, so only the agent that made the registration can
	// open it; it is handed over in status.credential. Without it (older
	// agents) the credential is written in the clear into a Secret, readable
	// through a Role made for the one registration.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	CredentialPublicKey string `json:"credentialPublicKey,omitempty"`
	// identityPublicKey is the agent's long-lived identity key (Ed25519,
	// base64 of the 32-byte public key), kept downstream in the agent's
	// Secret fleet-agent-identity. The first grant records it on the
	// Cluster (annotation fleet.cattle.io/agent-identity-key); a
	// registration of an existing Cluster through a token not bound to its
	// clientID is granted only when it is signed by the recorded key.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	IdentityPublicKey string `json:"identityPublicKey,omitempty"`
	// identitySignature is the Ed25519 signature (base64) by identityPublicKey
	// of this registration's namespace, name, clientID, clientRandom,
	// credentialPublicKey and request time (annotation
	// fleet.cattle.io/requested-at, which must be within 10 minutes of the
	// registration's creation). A registration with a signature that does
	// not verify is refused.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	IdentitySignature string `json:"identitySignature,omitempty"`
}

// ClusterRegistrationStatus is the controller's answer.
type ClusterRegistrationStatus struct {
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// clusterName is the Cluster this registration was matched to or made.
	// +optional
	ClusterName string `json:"clusterName,omitempty"`
	// granted is true once the credential was handed over: in credential
	// below, or, for a registration without spec.credentialPublicKey, in a
	// Secret of the system registration namespace.
	// +optional
	Granted bool `json:"granted,omitempty"`
	// credential is the agent's credential (a token of its request
	// ServiceAccount and where its cluster lives) sealed to
	// spec.credentialPublicKey: only the agent that made the registration
	// can open it, and it opens only for this registration. Written with
	// granted, in the same status write.
	// +optional
	// +kubebuilder:validation:MaxLength=8192
	Credential []byte `json:"credential,omitempty"`
}

func init() {
	SchemeBuilder.Register(&ClusterRegistration{}, &ClusterRegistrationList{})
}
