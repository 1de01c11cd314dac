package refusal

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestDescribe_NamesWhoWhatAndWhere(t *testing.T) {
	const who = "serviceaccount cattle-fleet-system/app"
	user := `User "system:serviceaccount:cattle-fleet-system:app"`
	cases := []struct {
		name string
		obj  string
		err  error
		want string
	}{
		{
			name: "namespaced, RBAC",
			obj:  "Deployment web/server",
			err: apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "deployments"}, "server",
				errors.New(user+` cannot patch resource "deployments" in API group "apps" in the namespace "web"`)),
			want: who + " may not patch deployments.apps in namespace web (Deployment web/server)",
		},
		{
			name: "cluster scope, core group, wrapped, object from the details",
			err: fmt.Errorf("ClusterRole/x apply failed: %w", apierrors.NewForbidden(schema.GroupResource{Group: "rbac.authorization.k8s.io", Resource: "clusterroles"}, "x",
				errors.New(user+` cannot create resource "clusterroles" in API group "rbac.authorization.k8s.io" at the cluster scope`))),
			want: who + " may not create clusterroles.rbac.authorization.k8s.io at cluster scope (x)",
		},
		{
			name: "core group",
			obj:  "Secret web/db",
			err: apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "db",
				errors.New(user+` cannot delete resource "secrets" in API group "" in the namespace "web"`)),
			want: who + " may not delete secrets in namespace web (Secret web/db)",
		},
		{
			name: "admission webhook: the server's words",
			obj:  "Pod web/p",
			err:  apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "p", errors.New("admission webhook denied: no privileged pods")),
			want: `Pod web/p refused: pods "p" is forbidden: admission webhook denied: no privileged pods`,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Describe(who, c.obj, c.err); got != c.want {
				t.Errorf("got  %q\nwant %q", got, c.want)
			}
		})
	}
}

// The API server's refusal message is parsed; whatever it holds, the
// description names who was refused and never panics.
func FuzzDescribeRefusal(f *testing.F) {
	f.Add(`User "u" cannot patch resource "deployments" in API group "apps" in the namespace "web"`, "Deployment web/x")
	f.Add(`User "u" cannot get resource "" in API group "" at the cluster scope`, "")
	f.Add(`cannot  resource "" in API group "`, "x")
	f.Fuzz(func(t *testing.T, msg, obj string) {
		err := apierrors.NewForbidden(schema.GroupResource{Resource: "things"}, "n", errors.New(msg))
		got := Describe("serviceaccount ns/sa", obj, err)
		if got == "" {
			t.Fatal("empty description")
		}
		if rbacDenial.MatchString(msg) && !strings.HasPrefix(got, "serviceaccount ns/sa may not ") {
			t.Errorf("an authorizer refusal not described as one: %q", got)
		}
	})
}
