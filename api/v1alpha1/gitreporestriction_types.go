package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GitRepoRestriction limits what the GitRepos of its namespace may use: the
// repositories, the ServiceAccounts downstream, the git credentials and the
// target namespaces, and gives defaults. Several in one namespace add up
// (package gitops/restriction says how; docs/operations.md "GitRepo and
// GitRepoRestriction"). As in Fleet, its fields are at the top level: it has
// no spec.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=fleet
// +kubebuilder:printcolumn:name="Default-ServiceAccount",type=string,JSONPath=`.defaultServiceAccount`
// +kubebuilder:printcolumn:name="Allowed-ServiceAccounts",type=string,JSONPath=`.allowedServiceAccounts`
type GitRepoRestriction struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// defaultServiceAccount is the serviceAccount of a GitRepo that sets
	// none.
	// +optional
	DefaultServiceAccount string `json:"defaultServiceAccount,omitempty"`
	// allowedServiceAccounts are the only serviceAccounts GitRepos may use.
	// +optional
	// +listType=atomic
	AllowedServiceAccounts []string `json:"allowedServiceAccounts,omitempty"`
	// allowedRepoPatterns are regular expressions (Go syntax), one of which
	// a GitRepo's repo must match as a whole (or equal verbatim).
	// +optional
	// +listType=atomic
	AllowedRepoPatterns []string `json:"allowedRepoPatterns,omitempty"`

	// defaultClientSecretName is the clientSecretName of a GitRepo that
	// sets none.
	// +optional
	DefaultClientSecretName string `json:"defaultClientSecretName,omitempty"`
	// allowedClientSecretNames are the only clientSecretNames GitRepos may
	// use.
	// +optional
	// +listType=atomic
	AllowedClientSecretNames []string `json:"allowedClientSecretNames,omitempty"`

	// allowedTargetNamespaces are the only targetNamespaces GitRepos may
	// use; when set, a GitRepo must set one.
	// +optional
	// +listType=atomic
	AllowedTargetNamespaces []string `json:"allowedTargetNamespaces,omitempty"`

	// allowedTargetNamespaceSelector: the GitRepos' targetNamespace must be
	// set, and its namespace downstream must have labels this selector
	// matches (checked by the agent on each cluster).
	// +optional
	AllowedTargetNamespaceSelector *metav1.LabelSelector `json:"allowedTargetNamespaceSelector,omitempty"`
}

// GitRepoRestrictionList is a list of GitRepoRestrictions.
//
// +kubebuilder:object:root=true
type GitRepoRestrictionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GitRepoRestriction `json:"items"`
}

func init() {
	SchemeBuilder.Register(&GitRepoRestriction{}, &GitRepoRestrictionList{})
}
