package controller_test

import (
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/controlplane"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/registration"
)

func kubeconfigWith(t *testing.T, mutate func(cfg *rest.Config)) []byte {
	t.Helper()
	cfg := rest.CopyConfig(env.Downstreams[0].Config)
	mutate(cfg)
	kc, err := controlplane.KubeconfigFor(cfg, "x")
	if err != nil {
		t.Fatal(err)
	}
	return kc
}

// TestImport_BadInputGivesItsConditionAndRecovers breaks one input at a
// time, checks the Cluster says what is wrong, fixes it, and checks the
// import then succeeds.
func TestImport_BadInputGivesItsConditionAndRecovers(t *testing.T) {
	good := env.Downstreams[0].Kubeconfig
	ds := env.Downstreams[0]
	type fixture struct {
		secret  map[string][]byte // nil: no Secret
		prepare func(t *testing.T, agentNS string) (fix func())
	}
	cases := []struct {
		name    string
		fx      fixture
		reason  string
		stalled bool
	}{
		{"secret missing", fixture{}, fleet.KubeConfigSecretMissingReason, true},
		{"key missing", fixture{secret: map[string][]byte{"kubeconfig": good}}, fleet.KubeConfigKeyMissingReason, true},
		{"kubeconfig unparsable", fixture{secret: map[string][]byte{"value": []byte("clusters: [not: {a kubeconfig")}}, fleet.KubeConfigInvalidReason, true},
		{"server unreachable", fixture{secret: map[string][]byte{"value": kubeconfigWith(t, func(c *rest.Config) { c.Host = "https://127.0.0.1:1" })}}, fleet.DownstreamUnreachableReason, false},
		{"CA mismatch", fixture{secret: map[string][]byte{"value": kubeconfigWith(t, func(c *rest.Config) { c.CAData = env.Downstreams[1].Config.CAData })}}, fleet.DownstreamTLSErrorReason, false},
		{"unauthorized", fixture{secret: map[string][]byte{"value": kubeconfigWith(t, func(c *rest.Config) {
			c.CertData, c.KeyData, c.BearerToken = nil, nil, "not-a-valid-token"
		})}}, fleet.DownstreamUnauthorizedReason, false},
		{"forbidden", fixture{prepare: func(t *testing.T, agentNS string) func() {
			return nil
		}}, fleet.DownstreamForbiddenReason, false},
		{"apply conflict", fixture{secret: map[string][]byte{"value": good}, prepare: func(t *testing.T, agentNS string) func() {
			// A Deployment of the same name whose immutable selector differs.
			if err := ds.Client.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentNS}}); err != nil {
				t.Fatal(err)
			}
			d := &appsv1.Deployment{
				ObjectMeta: metav1.ObjectMeta{Namespace: agentNS, Name: "fleet-agent"},
				Spec: appsv1.DeploymentSpec{
					Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "something-else"}},
					Template: corev1.PodTemplateSpec{
						ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "something-else"}},
						Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "x", Image: "x"}}},
					},
				},
			}
			if err := ds.Client.Create(t.Context(), d); err != nil {
				t.Fatal(err)
			}
			return func() {
				if err := ds.Client.Delete(t.Context(), d); err != nil {
					t.Fatal(err)
				}
			}
		}}, fleet.ApplyConflictReason, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ws := testenv.Namespace(t, up, "fleet-bad-")
			agentNS := "agent-" + ws
			secretData := tc.fx.secret
			var fix func()
			if tc.name == "forbidden" {
				secretData, fix = forbiddenKubeconfig(t, ws)
			}
			if tc.fx.prepare != nil {
				if f := tc.fx.prepare(t, agentNS); f != nil {
					fix = f
				}
			}
			if secretData != nil {
				if err := up.Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "kc"}, Data: secretData}); err != nil {
					t.Fatal(err)
				}
			}
			c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "bad"}, Spec: fleet.ClusterSpec{KubeConfigSecret: "kc", AgentNamespace: agentNS}}
			if err := up.Create(t.Context(), c); err != nil {
				t.Fatal(err)
			}
			got := waitCondition(t, c, fleet.ImportedCondition, metav1.ConditionFalse, tc.reason)
			ready := findCondition(got, fleet.ReadyCondition)
			if ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != tc.reason || ready.Message == "" {
				t.Errorf("Ready must say what is wrong: %+v", ready)
			}
			st := findCondition(got, fleet.StalledCondition)
			if tc.stalled != (st != nil && st.Status == metav1.ConditionTrue) {
				t.Errorf("Stalled: got %+v, want stalled=%v", st, tc.stalled)
			}
			t.Logf("message: %s", ready.Message)
			if tc.stalled {
				// No import identity for a Cluster whose kubeconfig is refused.
				err := up.Get(t.Context(), client.ObjectKey{Namespace: ws, Name: "import-token-bad"}, &fleet.ClusterRegistrationToken{})
				if !apierrors.IsNotFound(err) {
					t.Errorf("an import token was made for a refused kubeconfig (get: %v)", err)
				}
			}

			// Fix the input: the right kubeconfig Secret, or undo the
			// downstream problem.
			if fix != nil {
				fix()
			}
			if tc.name != "forbidden" && tc.name != "apply conflict" {
				s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "kc"}}
				_, err := controllerutilCreateOrUpdate(t, s, func() { s.Data = map[string][]byte{"value": good} })
				if err != nil {
					t.Fatal(err)
				}
			}
			waitImported(t, c, 0)
			if findCondition(getCluster(t, c), fleet.StalledCondition) != nil {
				t.Error("Stalled left behind after recovery")
			}
		})
	}
}

func findCondition(c *fleet.Cluster, t string) *metav1.Condition {
	for i := range c.Status.Conditions {
		if c.Status.Conditions[i].Type == t {
			return &c.Status.Conditions[i]
		}
	}
	return nil
}

func controllerutilCreateOrUpdate(t *testing.T, s *corev1.Secret, mutate func()) (bool, error) {
	t.Helper()
	err := up.Get(t.Context(), client.ObjectKeyFromObject(s), s)
	mutate()
	if apierrors.IsNotFound(err) {
		return true, up.Create(t.Context(), s)
	}
	if err != nil {
		return false, err
	}
	return false, up.Update(t.Context(), s)
}

// forbiddenKubeconfig is a kubeconfig for a downstream ServiceAccount with
// no rights; the fix binds it to cluster-admin.
func forbiddenKubeconfig(t *testing.T, name string) (map[string][]byte, func()) {
	t.Helper()
	ds := env.Downstreams[0]
	ns := "default"
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := ds.Client.Create(t.Context(), sa); err != nil {
		t.Fatal(err)
	}
	token, err := ds.ServiceAccountToken(t.Context(), ns, sa.Name, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := controlplane.KubeconfigFor(ds.ConfigForToken(token), "sa")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := clientcmd.RESTConfigFromKubeConfig(kc); err != nil {
		t.Fatal(err)
	}
	return map[string][]byte{"value": kc}, func() {
		crb := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("admin-%s", name)},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cluster-admin"},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa.Name, Namespace: ns}},
		}
		if err := ds.Client.Create(t.Context(), crb); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCluster_DeletionRemovesEverythingUpstreamAndTheAgentDownstream(t *testing.T) {
	ds := env.Downstreams[1]
	c := managerCluster(t, ds, nil)
	got := waitImported(t, c, 0)
	clusterNS := got.Status.Namespace
	if err := up.Delete(t.Context(), got); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "Cluster gone", func() error {
		err := up.Get(t.Context(), client.ObjectKeyFromObject(c), &fleet.Cluster{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there: %v", err)
	})
	gone := func(c client.Client, o client.Object) error {
		err := c.Get(t.Context(), client.ObjectKeyFromObject(o), o)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err == nil && !o.GetDeletionTimestamp().IsZero() {
			return nil // being deleted by the namespace controller
		}
		return fmt.Errorf("%T %s still exists (%v)", o, o.GetName(), err)
	}
	testenv.Eventually(t, 30*time.Second, "everything made for the cluster removed", func() error {
		for _, o := range []client.Object{
			&fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: "fleet-agent-c1"}},
			&fleet.ClusterRegistrationToken{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: "import-token-c1"}},
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: clusterNS}},
		} {
			if err := gone(up, o); err != nil {
				return err
			}
		}
		for _, o := range []client.Object{
			&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: c.Spec.AgentNamespace, Name: "fleet-agent"}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: c.Spec.AgentNamespace, Name: "fleet-agent-bootstrap"}},
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: c.Spec.AgentNamespace}},
		} {
			if err := gone(ds.Client, o); err != nil {
				return fmt.Errorf("downstream: %w", err)
			}
		}
		return nil
	})
	_ = ptr.To(0)
}

// An agent makes objects at runtime that no chart renders: its identity
// Secret, inventories, its direct endpoint's state, its impersonators.
// Deleting its Cluster removes them too, also when the agent's namespace
// was there before the push (an operator's, which stays with what the
// operator put in it).
func TestCluster_DeletionRemovesWhatTheAgentMadeAtRuntime(t *testing.T) {
	ds := env.Downstreams[1]
	agentNS := testenv.Namespace(t, ds.Client, "operator-agent-")
	operators := []client.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: agentNS, Name: "operator-settings"}},
		// The operator's certificate for the direct endpoint: no label.
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: agentNS, Name: "fleet-agent-direct-tls"}},
	}
	for _, o := range operators {
		if err := ds.Client.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}
	c := managerCluster(t, ds, func(c *fleet.Cluster) { c.Spec.AgentNamespace = agentNS })
	got := waitImported(t, c, 0)

	imp := map[string]string{registration.ImpersonatorLabel: "true"}
	runtime := []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: agentNS, Name: registration.IdentitySecretName}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: agentNS, Name: "fleet-inventory-hello", Labels: map[string]string{registration.InventoryLabel: "true"}}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: agentNS, Name: "fleet-agent-direct-state", Labels: map[string]string{registration.DirectLabel: "true"}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: registration.ImpersonationNamespace, Labels: imp}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "cattle-impersonation-" + agentNS, Labels: imp}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "cattle-impersonation-" + agentNS, Labels: imp},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cattle-impersonation-" + agentNS}},
	}
	for _, o := range runtime {
		if err := client.IgnoreAlreadyExists(ds.Client.Create(t.Context(), o)); err != nil {
			t.Fatal(err)
		}
	}
	if err := up.Delete(t.Context(), got); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "what the agent made at runtime removed downstream", func() error {
		for _, o := range runtime {
			err := ds.Client.Get(t.Context(), client.ObjectKeyFromObject(o), o)
			if err == nil && o.GetDeletionTimestamp().IsZero() {
				return fmt.Errorf("%T %s still there", o, o.GetName())
			}
			if err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
		return nil
	})
	for _, o := range append(operators, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentNS}}) {
		if err := ds.Client.Get(t.Context(), client.ObjectKeyFromObject(o), o); err != nil || !o.GetDeletionTimestamp().IsZero() {
			t.Errorf("the operator's %T %s was deleted: %v", o, o.GetName(), err)
		}
	}
}
