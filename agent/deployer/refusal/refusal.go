// Package refusal words the API server's refusals (403) of what the
// agent's deployer applies, for the person who can fix them: who may not
// do what, where, to which object.
package refusal

import (
	"errors"
	"fmt"
	"regexp"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// rbacDenial matches the message of the API server's authorizer refusal:
// `User "u" cannot patch resource "deployments" in API group "apps" in
// the namespace "web"` (or "at the cluster scope").
var rbacDenial = regexp.MustCompile(`cannot (\S+) resource "([^"]*)" in API group "([^"]*)" (?:in the namespace "([^"]*)"|at the cluster scope)`)

// Describe turns a 403 into a sentence for the person who can fix it:
// "serviceaccount cattle-fleet-system/app may not patch deployments.apps
// in namespace web (Deployment web/server)". A refusal that is not the
// authorizer's (an admission webhook's) keeps the server's message. obj
// may be empty when the caller does not know the object.
func Describe(who, obj string, err error) string {
	var status apierrors.APIStatus
	msg := err.Error()
	if errors.As(err, &status) {
		st := status.Status()
		msg = st.Message
		if obj == "" && st.Details != nil && st.Details.Name != "" {
			obj = st.Details.Name
		}
	}
	suffix := ""
	if obj != "" {
		suffix = " (" + obj + ")"
	}
	m := rbacDenial.FindStringSubmatch(msg)
	if m == nil {
		if obj == "" {
			return "refused: " + msg
		}
		return obj + " refused: " + msg
	}
	verb, resource, group, ns := m[1], m[2], m[3], m[4]
	if group != "" {
		resource += "." + group
	}
	where := "at cluster scope"
	if ns != "" {
		where = "in namespace " + ns
	}
	return fmt.Sprintf("%s may not %s %s %s%s", who, verb, resource, where, suffix)
}
