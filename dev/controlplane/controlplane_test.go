package controlplane_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/controlplane"
	"github.com/gitops-fleet/fleet/dev/testenv"
)

var env *controlplane.Env

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.Options{ControlPlanes: &controlplane.Options{Downstreams: 2}}, func(s *testenv.Suite) error {
		env = s.Env
		return nil
	})
}

func TestStart_FleetCRDsEstablishedUpstreamOnly(t *testing.T) {
	kinds := []string{"clusters", "clustergroups", "clusterregistrationtokens", "clusterregistrations", "bundles", "bundledeployments"}
	for _, k := range kinds {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := env.Upstream.Client.Get(t.Context(), client.ObjectKey{Name: k + ".fleet.cattle.io"}, crd); err != nil {
			t.Fatalf("CRD %s not installed upstream: %v", k, err)
		}
		established := false
		for _, c := range crd.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				established = true
			}
		}
		if !established {
			t.Errorf("CRD %s not established", k)
		}
	}
	for _, d := range env.Downstreams {
		err := d.Client.Get(t.Context(), client.ObjectKey{Name: "clusters.fleet.cattle.io"}, &apiextensionsv1.CustomResourceDefinition{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("%s: want no fleet CRDs downstream, got %v", d.Name, err)
		}
	}
}

func TestCRD_TokenTTLMustBeAGoDuration(t *testing.T) {
	c := env.Upstream.Client
	ns := testenv.Namespace(t, c, "ttl-")
	cases := []struct {
		ttl   string
		valid bool
	}{
		{"12h", true}, {"1h30m", true}, {"90s", true}, {"1.5h", true}, {"0", true},
		{"1d", false}, {"tomorrow", false}, {"-5m", false}, {"12", false},
	}
	for _, tc := range cases {
		t.Run(tc.ttl, func(t *testing.T) {
			// Unstructured, so the test can send values the Go type cannot hold.
			tok := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "fleet.cattle.io/v1alpha1", "kind": "ClusterRegistrationToken",
				"metadata": map[string]any{"generateName": "tok-", "namespace": ns},
				"spec":     map[string]any{"ttl": tc.ttl},
			}}
			err := c.Create(t.Context(), tok)
			if tc.valid && err != nil {
				t.Fatalf("ttl %q rejected: %v", tc.ttl, err)
			}
			if !tc.valid {
				if err == nil {
					t.Fatalf("ttl %q accepted, want rejected", tc.ttl)
				}
				if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "ttl must be a Go duration") {
					t.Fatalf("ttl %q: want an Invalid error naming the rule, got %v", tc.ttl, err)
				}
			}
		})
	}
}

// TestPolicy_KubeConfigSecretOfAnotherNamespaceNeedsTheRightToReadIt: a
// Cluster may name a kubeconfig Secret of another namespace only when the
// user who writes it may read that Secret (the controller, which may read
// every Secret, must not read one for a user who could not).
func TestPolicy_KubeConfigSecretOfAnotherNamespaceNeedsTheRightToReadIt(t *testing.T) {
	admin := env.Upstream.Client
	ns := testenv.Namespace(t, admin, "team-")
	readable := testenv.Namespace(t, admin, "shared-")
	// A workspace user: Clusters in ns, and get on Secret kc in readable.
	objs := []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "user"}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "clusters"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{"fleet.cattle.io"}, Resources: []string{"clusters"}, Verbs: []string{"*"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "clusters"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "clusters"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "user"}}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: readable, Name: "kc"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"kc"}, Verbs: []string{"get"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: readable, Name: "kc"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "kc"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "user"}}},
	}
	for _, o := range objs {
		if err := admin.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}
	tok, err := env.Upstream.ServiceAccountToken(t.Context(), ns, "user", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	user, err := client.New(env.Upstream.ConfigForToken(tok), client.Options{Scheme: controlplane.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name     string
		c        client.Client
		secretNS string
		allowed  bool
	}{
		{"user, own namespace (implicit)", user, "", true},
		{"user, own namespace", user, ns, true},
		{"user, a Secret they may read", user, readable, true},
		{"user, another workspace", user, "fleet-default", false},
		{"user, the controller's namespace", user, "cattle-fleet-system", false},
		{"user, kube-system", user, "kube-system", false},
		{"admin, another namespace", admin, "kube-system", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// The admission policy is loaded asynchronously after it is
			// created, so the first rejection may take a moment to appear.
			testenv.Eventually(t, 20*time.Second, "admission result", func() (bool, error) {
				cl := &fleet.Cluster{
					ObjectMeta: metav1.ObjectMeta{GenerateName: "c-", Namespace: ns},
					Spec:       fleet.ClusterSpec{KubeConfigSecret: "kc", KubeConfigSecretNamespace: tc.secretNS},
				}
				err := tc.c.Create(t.Context(), cl, client.DryRunAll)
				if tc.allowed {
					return err == nil, err
				}
				if err == nil {
					return false, fmt.Errorf("namespace %q accepted", tc.secretNS)
				}
				if !strings.Contains(err.Error(), "only a user who may read Secret "+tc.secretNS+"/kc may point a Cluster at it") {
					return false, err
				}
				return true, nil
			})
		})
	}
}

func TestCRD_ClusterCrossFieldRules(t *testing.T) {
	c := env.Upstream.Client
	ns := testenv.Namespace(t, c, "cel-")
	cases := []struct {
		name string
		spec fleet.ClusterSpec
		want string
	}{
		{"secret namespace without secret", fleet.ClusterSpec{KubeConfigSecretNamespace: "fleet-default"}, "name the kubeconfig Secret too"},
		{"pdb with both bounds", fleet.ClusterSpec{AgentSchedulingCustomization: &fleet.AgentSchedulingCustomization{
			PodDisruptionBudget: &fleet.PodDisruptionBudgetSpec{MinAvailable: "1", MaxUnavailable: "1"}}}, "set either minAvailable or maxUnavailable, not both"},
		{"pdb percentage typo", fleet.ClusterSpec{AgentSchedulingCustomization: &fleet.AgentSchedulingCustomization{
			PodDisruptionBudget: &fleet.PodDisruptionBudgetSpec{MinAvailable: "50 %"}}}, "minAvailable"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cl := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{GenerateName: "c-", Namespace: ns}, Spec: tc.spec}
			err := c.Create(t.Context(), cl, client.DryRunAll)
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want Invalid with %q", err, tc.want)
			}
		})
	}
	ok := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{GenerateName: "c-", Namespace: ns}, Spec: fleet.ClusterSpec{
		KubeConfigSecret: "kc", AgentSchedulingCustomization: &fleet.AgentSchedulingCustomization{
			PodDisruptionBudget: &fleet.PodDisruptionBudgetSpec{MinAvailable: "1", MaxUnavailable: "0"}}}}
	if err := c.Create(t.Context(), ok, client.DryRunAll); err != nil {
		t.Fatalf("valid cluster rejected: %v", err)
	}
}

func TestCRD_ClusterPrinterColumns(t *testing.T) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := env.Upstream.Client.Get(t.Context(), client.ObjectKey{Name: "clusters.fleet.cattle.io"}, crd); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, col := range crd.Spec.Versions[0].AdditionalPrinterColumns {
		got[col.Name] = col.JSONPath
	}
	for name, path := range map[string]string{
		"Bundles-Ready": ".status.display.readyBundles",
		"Last-Seen":     ".status.agent.lastSeen",
		"Status":        `.status.conditions[?(@.type=="Ready")].message`,
	} {
		if got[name] != path {
			t.Errorf("column %s: got %q, want %q", name, got[name], path)
		}
	}
}

func TestControllerManager_GarbageCollectsOwnedObjects(t *testing.T) {
	for _, cp := range env.All() {
		t.Run(cp.Name, func(t *testing.T) {
			c := cp.Client
			ns := testenv.Namespace(t, c, "gc-")
			owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner", Namespace: ns}}
			if err := c.Create(t.Context(), owner); err != nil {
				t.Fatal(err)
			}
			dep := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "dependent", Namespace: ns, OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID,
			}}}}
			if err := c.Create(t.Context(), dep); err != nil {
				t.Fatal(err)
			}
			if err := c.Delete(t.Context(), owner); err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, 30*time.Second, "dependent garbage-collected", func() (bool, error) {
				err := c.Get(t.Context(), client.ObjectKeyFromObject(dep), &corev1.ConfigMap{})
				return apierrors.IsNotFound(err), err
			})
		})
	}
}

func TestControllerManager_DeletesNamespacesAndMakesDefaultServiceAccounts(t *testing.T) {
	cp := env.Downstreams[0]
	c := cp.Client
	ns := testenv.Namespace(t, c, "nsdel-")
	testenv.Eventually(t, 30*time.Second, "default ServiceAccount", func() (bool, error) {
		err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "default"}, &corev1.ServiceAccount{})
		return err == nil, err
	})
	if err := c.Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: ns}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "namespace deleted", func() (bool, error) {
		err := c.Get(t.Context(), client.ObjectKey{Name: ns}, &corev1.Namespace{})
		return apierrors.IsNotFound(err), err
	})
}

func TestKubeconfigSecret_ReachesDownstream(t *testing.T) {
	d := env.Downstreams[1]
	s := d.KubeconfigSecret("fleet-default", "dev-2-kubeconfig")
	cfg, err := clientcmd.RESTConfigFromKubeConfig(s.Data["value"])
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: controlplane.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	marker := testenv.Namespace(t, d.Client, "marker-")
	if err := c.Get(t.Context(), client.ObjectKey{Name: marker}, &corev1.Namespace{}); err != nil {
		t.Fatalf("kubeconfig from the secret does not reach %s: %v", d.Name, err)
	}
	if err := env.Downstreams[0].Client.Get(t.Context(), client.ObjectKey{Name: marker}, &corev1.Namespace{}); !apierrors.IsNotFound(err) {
		t.Fatalf("downstreams are not separate clusters: %v", err)
	}
}

func TestServiceAccountToken_AuthenticatesWithRBAC(t *testing.T) {
	cp := env.Upstream
	c := cp.Client
	ns := testenv.Namespace(t, c, "sa-")
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "reader", Namespace: ns}}
	if err := c.Create(t.Context(), sa); err != nil {
		t.Fatal(err)
	}
	token, err := cp.ServiceAccountToken(t.Context(), ns, sa.Name, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	asSA, err := client.New(cp.ConfigForToken(token), client.Options{Scheme: controlplane.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	err = asSA.List(t.Context(), &corev1.ConfigMapList{}, client.InNamespace(ns))
	if !apierrors.IsForbidden(err) {
		t.Fatalf("want Forbidden without RBAC, got %v", err)
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "cm-reader", Namespace: ns}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"list"},
	}}}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "cm-reader", Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa.Name, Namespace: ns}},
	}
	for _, o := range []client.Object{role, rb} {
		if err := c.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 10*time.Second, "RBAC to take effect", func() (bool, error) {
		err := asSA.List(t.Context(), &corev1.ConfigMapList{}, client.InNamespace(ns))
		return err == nil, err
	})
}

func TestStart_AggregationLayerConfigured(t *testing.T) {
	for _, cp := range env.All() {
		cm, err := cp.ExtensionAuthentication(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if got, want := strings.TrimSpace(cm.Data["requestheader-client-ca-file"]), strings.TrimSpace(string(cp.RequestHeaderCA())); got != want {
			t.Errorf("%s: requestheader CA in %s is not the control plane's front-proxy CA", cp.Name, controlplane.ExtensionAuthConfigMap)
		}
		for k, want := range map[string]string{
			"requestheader-allowed-names":        `["` + controlplane.FrontProxyClientName + `"]`,
			"requestheader-username-headers":     `["X-Remote-User"]`,
			"requestheader-group-headers":        `["X-Remote-Group"]`,
			"requestheader-extra-headers-prefix": `["X-Remote-Extra-"]`,
		} {
			if cm.Data[k] != want {
				t.Errorf("%s: %s = %q, want %q", cp.Name, k, cm.Data[k], want)
			}
		}
	}
}
