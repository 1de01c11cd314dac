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
// +kubebuilder:resource:categories=fleet,shortName=crt
// +kubebuilder:printcolumn:name="Secret-Name",type=string,JSONPath=`.status.secretName`
// +kubebuilder:printcolumn:name="Expires",type=string,JSONPath=`.status.expires`
// +kubebuilder:printcolumn:name="Approval",type=string,JSONPath=`.spec.approval`
// +kubebuilder:printcolumn:name="Max-Clusters",type=integer,JSONPath=`.spec.maxClusters`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
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

	// approval decides whether registrations made with this token are granted
	// at once (Automatic, the default) or wait, Granted=False with reason
	// PendingApproval, until someone allowed to approve them (the "approve"
	// verb on clusterregistrations in this namespace) sets annotation
	// fleet.cattle.io/approved: "true" on the ClusterRegistration.
	// +optional
	// +kubebuilder:validation:Enum=Automatic;Manual
	// +kubebuilder:default=Automatic
	Approval ApprovalMode `json:"approval,omitempty"`

	// maxClusters, when set, is how many distinct clusters may be registered
	// through this token; registrations of further clusters are refused with
	// reason TokenLimitReached. Clusters registered before it was set do not
	// count; re-registering a counted cluster does not count again, and
	// deleting a Cluster does not free its place (status.registeredClusters).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	MaxClusters *int32 `json:"maxClusters,omitempty"`
}

// ApprovalMode says how registrations made with a token are approved.
type ApprovalMode string

const (
	// ApprovalAutomatic grants registrations without a person's approval.
	ApprovalAutomatic ApprovalMode = "Automatic"
	// ApprovalManual keeps registrations pending until approved.
	ApprovalManual ApprovalMode = "Manual"
)

// GetApproval returns the approval mode, default Automatic.
func (s *ClusterRegistrationTokenSpec) GetApproval() ApprovalMode {
	if s.Approval == "" {
		return ApprovalAutomatic
	}
	return s.Approval
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
	// registeredClusters are the Clusters (names in the token's namespace)
	// registered through this token since spec.maxClusters was set: the
	// places of the limit that are taken. Kept only while maxClusters is set.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=1000
	// +kubebuilder:validation:items:MaxLength=253
	RegisteredClusters []string `json:"registeredClusters,omitempty"`
}

func init() {
	SchemeBuilder.Register(&ClusterRegistrationToken{}, &ClusterRegistrationTokenList{})
}
