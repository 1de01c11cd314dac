package agent_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/names"
)

// TestBundle_TargetServiceAccountBoundsWhatTheAgentApplies: a Bundle whose
// target names a serviceAccount (overriding the Bundle's own) goes through
// the controller's targeting into the BundleDeployment, and the real agent
// applies it as that ServiceAccount: what its RBAC allows lands, what it
// does not is refused and the refusal reaches the Bundle's status.
func TestBundle_TargetServiceAccountBoundsWhatTheAgentApplies(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-sa-")
	values := newToken(t, ws, "tok", fleet.ClusterRegistrationTokenSpec{})
	ds := envDownstream(0)
	agentNS := "agent-" + ws
	helmInstall(t, ds, agentNS, values, map[string]any{"clientID": ws, "labels": map[string]any{"env": "sa"}})
	a := startAgent(t, ds, agentNS, nil)
	_, cluster := waitRegistered(t, a)

	// The downstream admin's part: a ServiceAccount next to the agent that
	// may write ConfigMaps in one namespace, nothing else.
	appNS := "sa-" + ws
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: appNS, Name: "bounded"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "create", "patch", "delete"}}},
	}
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: appNS}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: agentNS, Name: "bounded"}},
		role,
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: appNS, Name: "bounded"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "bounded"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: agentNS, Name: "bounded"}},
		},
	} {
		if err := ds.Client.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}

	cmYAML := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  color: blue\n"
	b := &fleet.Bundle{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "app"},
		Spec: fleet.BundleSpec{
			// The Bundle's own serviceAccount does not exist downstream;
			// the target's wins.
			BundleDeploymentOptions: fleet.BundleDeploymentOptions{DefaultNamespace: appNS, ServiceAccount: "missing"},
			Resources:               []fleet.BundleResource{{Name: "cm.yaml", Content: cmYAML}},
			Targets: []fleet.BundleTarget{{
				ClusterName:             cluster,
				BundleDeploymentOptions: fleet.BundleDeploymentOptions{ServiceAccount: "bounded"},
			}},
		},
	}
	if err := up.Create(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "configmap applied as the ServiceAccount", func() error {
		cm, err := configMap(t, ds, appNS, "settings")
		if err != nil {
			return err
		}
		if cm.Data["color"] != "blue" {
			return fmt.Errorf("data %v", cm.Data)
		}
		return nil
	})
	bd := &fleet.BundleDeployment{}
	if err := up.Get(t.Context(), client.ObjectKey{Namespace: names.ClusterNamespace(ws, cluster), Name: "app"}, bd); err != nil {
		t.Fatal(err)
	}
	if bd.Spec.Options.ServiceAccount != "bounded" {
		t.Errorf("BundleDeployment options.serviceAccount = %q, want the target's bounded", bd.Spec.Options.ServiceAccount)
	}

	// A ClusterRole joins the Bundle: refused as a whole, and the Bundle
	// says why.
	roleYAML := "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: " + ws + "-reader\nrules: []\n"
	updateBundle(t, ws, "app", func(b *fleet.Bundle) {
		b.Spec.Resources = []fleet.BundleResource{
			{Name: "cm.yaml", Content: strings.Replace(cmYAML, "blue", "green", 1)},
			{Name: "role.yaml", Content: roleYAML},
		}
	})
	want := "serviceaccount " + agentNS + "/bounded may not patch clusterroles.rbac.authorization.k8s.io at cluster scope (ClusterRole " + ws + "-reader)"
	testenv.Eventually(t, 60*time.Second, "refusal on the Bundle's status", func() error {
		s := bundleStatus(t, ws, "app").Status.Summary
		if s.ErrApplied != 1 || len(s.NonReadyResources) != 1 || !strings.Contains(s.NonReadyResources[0].Message, want) {
			return fmt.Errorf("summary %+v", s)
		}
		return nil
	})
	if err := ds.Client.Get(t.Context(), client.ObjectKey{Name: ws + "-reader"}, &rbacv1.ClusterRole{}); !apierrors.IsNotFound(err) {
		t.Errorf("the refused ClusterRole exists (%v)", err)
	}
	if cm, err := configMap(t, ds, appNS, "settings"); err != nil || cm.Data["color"] != "blue" {
		t.Errorf("configmap of the refused deployment changed: %v (%v)", cm.Data, err)
	}
}
