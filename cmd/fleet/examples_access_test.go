package main

import (
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gitops-fleet/fleet/agent/access"
	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

// TestGitopsExample_TeamAccessGrantsBothSides checks access/payments.yaml
// says what the README says: upstream, Group payments gets clusters/proxy
// (and get) on exactly Cluster dev-1; downstream, the Bundle renders for
// dev-1 only, to one RoleBinding of ClusterRole view to that group under
// the name the agent gives it (fleet:<group>). test/access applies the same
// objects to real API servers and uses them through fleet-proxy.
func TestGitopsExample_TeamAccessGrantsBothSides(t *testing.T) {
	objs := buildGitops(t)
	role := find[*rbacv1.Role](t, objs, "payments-dev-1-access")
	binding := find[*rbacv1.RoleBinding](t, objs, "payments-dev-1-access")
	bundle := find[*fleet.Bundle](t, objs, "payments-view")
	dev1 := find[*fleet.Cluster](t, objs, "dev-1")

	// Upstream.
	if binding.RoleRef != (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name}) || len(binding.Subjects) != 1 ||
		binding.Subjects[0].Kind != rbacv1.GroupKind || binding.Subjects[0].APIGroup != rbacv1.GroupName {
		t.Fatalf("RoleBinding %s: want Role %s bound to one Group, got roleRef %+v subjects %+v", binding.Name, role.Name, binding.RoleRef, binding.Subjects)
	}
	team := binding.Subjects[0].Name
	allows := func(resource, verb string) bool {
		for _, r := range role.Rules {
			if slices.Contains(r.APIGroups, fleet.GroupVersion.Group) && slices.Contains(r.Resources, resource) &&
				slices.Contains(r.Verbs, verb) && slices.Equal(r.ResourceNames, []string{dev1.Name}) {
				return true
			}
		}
		return false
	}
	for _, verb := range []string{"get", "create", "update", "patch", "delete"} {
		if !allows("clusters/proxy", verb) {
			t.Errorf("Role %s must allow %s on clusters/proxy of exactly %s: %+v", role.Name, verb, dev1.Name, role.Rules)
		}
	}
	if !allows("clusters", "get") {
		t.Errorf("Role %s must allow get on Cluster %s (fleet kubeconfig checks it exists): %+v", role.Name, dev1.Name, role.Rules)
	}
	for _, r := range role.Rules {
		if len(r.ResourceNames) == 0 || slices.Contains(r.Verbs, "*") || slices.Contains(r.Resources, "*") {
			t.Errorf("Role %s has a rule wider than Cluster %s: %+v", role.Name, dev1.Name, r)
		}
	}

	// Downstream: dev-1 gets the RoleBinding, no other cluster anything.
	var groups []*fleet.ClusterGroup
	for _, o := range objs {
		if g, ok := o.obj.(*fleet.ClusterGroup); ok {
			groups = append(groups, g)
		}
	}
	out := controllerRender(t, bundle, dev1, groups)
	if out == nil {
		t.Fatalf("Bundle %s does not select %s", bundle.Name, dev1.Name)
	}
	rendered, err := out.Objects()
	if err != nil {
		t.Fatal(err)
	}
	if len(rendered) != 1 || rendered[0].GetKind() != "RoleBinding" {
		t.Fatalf("want one RoleBinding, got:\n%s", out.YAML)
	}
	rb := &rbacv1.RoleBinding{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(rendered[0].Object, rb, true); err != nil {
		t.Fatal(err)
	}
	if bundle.Spec.DefaultNamespace != "payments" || (rb.Namespace != "" && rb.Namespace != "payments") {
		t.Errorf("the RoleBinding goes to namespace %q (defaultNamespace %q), want payments", rb.Namespace, bundle.Spec.DefaultNamespace)
	}
	wantSubject := rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: access.Prefix + team}
	if rb.RoleRef != (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"}) || !slices.Equal(rb.Subjects, []rbacv1.Subject{wantSubject}) {
		t.Errorf("downstream RoleBinding: roleRef %+v subjects %+v, want ClusterRole view bound to %+v (upstream group %q as the agent names it)",
			rb.RoleRef, rb.Subjects, wantSubject, team)
	}
	prod, err := readCluster(gitopsDir + "/clusters/more/prod-eu.yaml")
	if err != nil {
		t.Fatal(err)
	}
	edge, err := readCluster(gitopsDir + "/clusters/more/edge-042.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dev2 := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet-default", Name: "dev-2", Labels: map[string]string{"env": "dev"}}}
	for _, c := range []*fleet.Cluster{dev2, prod, edge} {
		if controllerRender(t, bundle, c, groups) != nil {
			t.Errorf("Bundle %s must deploy only to %s (the upstream Role names only it), but selects %s", bundle.Name, dev1.Name, c.Name)
		}
	}

	// The README shows the team member's command for this Cluster.
	if cmd := "fleet kubeconfig --cluster " + dev1.Namespace + "/" + dev1.Name; !strings.Contains(readme(t), cmd) {
		t.Errorf("examples/gitops/README.md must show how a team member uses %q", cmd)
	}
}
