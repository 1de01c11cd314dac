package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ClusterRegistrationToken lets agents register clusters into its namespace.
// The controller makes an import ServiceAccount that may only create
// ClusterRegistrations, and a Secret with the token's name whose key "values"
// is a values file for `helm install fleet-agent charts/fleet-agent`.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=fleet
// +kubebuilder:printcolumn:name="Secret-Name",type=string,JSONPath=`.status.secretName`
// +kubebuilder:printcolumn:name="Expires",type=string,JSONPath=`.status.expires`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ClusterRegistrationToken struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec ClusterRegistrationTokenSpec `json:"spec,omitempty"`
	// +optional
	Status ClusterRegistrationTokenStatus `json:"status,omitempty"`
}

// ClusterRegistrationTokenList is a list of ClusterRegistrationTokens.
//
// +kubebuilder:object:root=true
type ClusterRegistrationTokenList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterRegistrationToken `json:"items"`
}

// ClusterRegistrationTokenSpec configures a registration token.
type ClusterRegistrationTokenSpec struct {
	// ttl is how long the token lives after creation, as a Go duration
	// ("12h", "90m", "1h30m"). "0" or no value means it never expires, unless
	// the controller is configured to require a TTL.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self == '0' || self.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$')",message="ttl must be a Go duration with units ns, us, ms, s, m or h, such as 12h or 1h30m (days are not allowed), or 0 for no expiry"
	TTL *metav1.Duration `json:"ttl,omitempty"`

	// clientID, when set, binds the token to one cluster: registrations made
	// with it for any other clientID are refused.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ClientID string `json:"clientID,omitempty"`
}

// ClusterRegistrationTokenStatus reports the token's values Secret and expiry.
type ClusterRegistrationTokenStatus struct {
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// expires is when the token and everything it made are deleted.
	// +optional
	Expires *metav1.Time `json:"expires,omitempty"`
	// secretName is the Secret (in the token's namespace) whose key "values"
	// holds the values file for the agent chart.
	// +optional
	SecretName string `json:"secretName,omitempty"`
}

func init() {
	SchemeBuilder.Register(&ClusterRegistrationToken{}, &ClusterRegistrationTokenList{})
}
