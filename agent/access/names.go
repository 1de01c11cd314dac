package access

import (
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/gitops-fleet/fleet/internal/assertion"
	"github.com/gitops-fleet/fleet/internal/registration"
)

const (
	// Namespace holds the impersonators' ServiceAccounts.
	Namespace = registration.ImpersonationNamespace
	// NamePrefix starts the name of each impersonator object.
	NamePrefix = "cattle-impersonation-"
	// Prefix starts every downstream user and group name.
	Prefix = "fleet:"
	// FieldOwner is the field manager of the impersonator objects.
	FieldOwner = "fleet-agent"

	// AnnotationImpersonates holds the full upstream user name.
	AnnotationImpersonates = "fleet.cattle.io/impersonates"
	// AnnotationLastUsed is when the impersonator last served a request
	// (RFC 3339, written at most hourly).
	AnnotationLastUsed = "fleet.cattle.io/last-used"
	// LabelImpersonator marks the impersonator objects (value "true").
	LabelImpersonator = registration.ImpersonatorLabel
)

// ImpersonatorID is the <id> of the impersonator of an upstream user: the
// first 20 characters of base32(SHA-256(user)), lower case.
func ImpersonatorID(user string) string {
	sum := sha256.Sum256([]byte(user))
	return strings.ToLower(base32.StdEncoding.EncodeToString(sum[:]))[:20]
}

// ImpersonatorName is the name of the ServiceAccount, ClusterRole and
// ClusterRoleBinding of an upstream user's impersonator.
func ImpersonatorName(user string) string { return NamePrefix + ImpersonatorID(user) }

// Downstream is the identity a request runs as downstream.
type Downstream struct {
	User   string
	UID    string
	Groups []string
	Extra  map[string][]string
}

// DownstreamFor maps an asserted upstream identity to downstream names:
// user fleet:<user>, groups fleet:<group> (so no upstream identity is ever a
// downstream system: identity), the UID as is, only allow-listed extras.
func DownstreamFor(id assertion.Identity) Downstream {
	d := Downstream{User: Prefix + id.User, UID: id.UID}
	for _, g := range id.Groups {
		if g == "" || g == "system:authenticated" {
			continue
		}
		d.Groups = append(d.Groups, Prefix+g)
	}
	slices.Sort(d.Groups)
	d.Groups = slices.Compact(d.Groups)
	for _, k := range assertion.AllowedExtras {
		if v := id.Extra[k]; len(v) > 0 {
			if d.Extra == nil {
				d.Extra = map[string][]string{}
			}
			vs := slices.Clone(v)
			slices.Sort(vs)
			d.Extra[k] = slices.Compact(vs)
		}
	}
	return d
}

// Rules are the impersonator's ClusterRole rules: impersonate on exactly
// this user, these groups, this uid and these extras, nothing else.
func (d Downstream) Rules() []rbacv1.PolicyRule {
	rules := []rbacv1.PolicyRule{{
		APIGroups: []string{""}, Resources: []string{"users"}, Verbs: []string{"impersonate"}, ResourceNames: []string{d.User},
	}}
	if len(d.Groups) > 0 {
		rules = append(rules, rbacv1.PolicyRule{
			APIGroups: []string{""}, Resources: []string{"groups"}, Verbs: []string{"impersonate"}, ResourceNames: slices.Clone(d.Groups),
		})
	}
	if d.UID != "" {
		rules = append(rules, rbacv1.PolicyRule{
			APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"uids"}, Verbs: []string{"impersonate"}, ResourceNames: []string{d.UID},
		})
	}
	for _, k := range assertion.AllowedExtras {
		if v := d.Extra[k]; len(v) > 0 {
			rules = append(rules, rbacv1.PolicyRule{
				APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"userextras/" + k}, Verbs: []string{"impersonate"}, ResourceNames: slices.Clone(v),
			})
		}
	}
	return rules
}

// rulesHash identifies the rules, to notice when they changed.
func (d Downstream) rulesHash() string {
	b, _ := json.Marshal(d.Rules())
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
