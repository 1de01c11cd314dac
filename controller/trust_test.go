package controller_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/controlplane"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/names"
)

// The tests of SPEC §6's first row: whoever commits a Cluster and its
// kubeconfig Secret may register that cluster into the Cluster's own
// workspace, and nothing more.

// unsafeKubeconfig turns the downstream's working kubeconfig into one that
// asks the controller to use something of its own instead of (or besides)
// the credentials in it.
func unsafeKubeconfig(t *testing.T, ds *controlplane.ControlPlane, mutate func(cl *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo)) []byte {
	t.Helper()
	cfg, err := clientcmd.Load(ds.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	ctx := cfg.Contexts[cfg.CurrentContext]
	mutate(cfg.Clusters[ctx.Cluster], cfg.AuthInfos[ctx.AuthInfo])
	out, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestImport_KubeconfigMayNotMakeTheControllerUseItsOwnCredentials: the
// reproduced case (a tokenFile naming the controller's own ServiceAccount
// token) and every other way out of "use the credentials in the
// kubeconfig". Each leaves the Cluster Stalled with KubeConfigUnsafe naming
// the field, and nothing is pushed: no import token, no agent downstream,
// no program run.
func TestImport_KubeconfigMayNotMakeTheControllerUseItsOwnCredentials(t *testing.T) {
	ds := env.Downstreams[0]
	dir := t.TempDir()
	// A file that holds a token the downstream accepts: if the controller
	// read it, the push would work.
	tokenFile := filepath.Join(dir, "token")
	for _, o := range []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "trust-test-admin"}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "trust-test-admin"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "kube-system", Name: "trust-test-admin"}}},
	} {
		if err := ds.Client.Create(t.Context(), o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	tok, err := ds.ServiceAccountToken(t.Context(), "kube-system", "trust-test-admin", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tokenFile, []byte(tok), 0o600); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(dir, "exec-ran")
	cases := []struct {
		name, field string
		mutate      func(cl *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo)
	}{
		{"tokenFile", "tokenFile", func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.ClientCertificateData, u.ClientKeyData, u.Token, u.TokenFile = nil, nil, "", tokenFile
		}},
		{"exec", "exec", func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.Exec = &clientcmdapi.ExecConfig{APIVersion: "client.authentication.k8s.io/v1", Command: "/bin/sh",
				Args: []string{"-c", "touch " + marker}, InteractiveMode: clientcmdapi.NeverExecInteractiveMode}
		}},
		{"CA file", "certificate-authority", func(cl *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) {
			cl.CertificateAuthority, cl.CertificateAuthorityData = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt", nil
		}},
		{"TLS check off", "insecure-skip-tls-verify", func(cl *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) {
			cl.InsecureSkipTLSVerify, cl.CertificateAuthorityData = true, nil
		}},
		{"proxy", "proxy-url", func(cl *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) { cl.ProxyURL = "http://127.0.0.1:1" }},
		// No scheme: client-go dials it as plain http (finding 5 of
		// issue 27), whatever the kubeconfig's CA says.
		{"server without a scheme", "server", func(cl *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) {
			cl.Server = strings.TrimPrefix(cl.Server, "https://")
		}},
	}
	var stalledClusters []*fleet.Cluster
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ws := testenv.Namespace(t, up, "fleet-unsafe-")
			secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "kc"},
				Data: map[string][]byte{"value": unsafeKubeconfig(t, ds, tc.mutate)}}
			if err := up.Create(t.Context(), secret); err != nil {
				t.Fatal(err)
			}
			c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "c1"},
				Spec: fleet.ClusterSpec{KubeConfigSecret: "kc", AgentNamespace: "agent-" + ws}}
			if err := up.Create(t.Context(), c); err != nil {
				t.Fatal(err)
			}
			got := waitCondition(t, c, fleet.StalledCondition, metav1.ConditionTrue, fleet.KubeConfigUnsafeReason)
			msg := findCondition(got, fleet.ReadyCondition).Message
			if !strings.Contains(msg, tc.field) || !strings.Contains(msg, "insecureKubeconfig.") || !strings.Contains(msg, `key "value"`) {
				t.Errorf("the message must name the Secret's key, the field %s and the opt-in: %s", tc.field, msg)
			}
			stalledClusters = append(stalledClusters, c)
		})
	}
	// Nothing of any of them happened anywhere.
	for _, c := range stalledClusters {
		err := up.Get(t.Context(), client.ObjectKey{Namespace: c.Namespace, Name: names.ImportToken(c.Name)}, &fleet.ClusterRegistrationToken{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("%s: an import token was made for a refused kubeconfig: %v", c.Namespace, err)
		}
		err = ds.Client.Get(t.Context(), client.ObjectKey{Name: c.Spec.AgentNamespace}, &corev1.Namespace{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("%s: the agent's namespace exists downstream: %v", c.Namespace, err)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the exec plugin of a kubeconfig Secret ran inside the controller")
	}

	// The opt-in named in the message lets exactly that through.
	const base = `"apiServerURL": "https://upstream.example.com:6443", "apiServerCA": "dXBzdHJlYW0tY2E="`
	t.Cleanup(func() { setControllerConfig(t, context.Background(), "{"+base+"}") })
	setControllerConfig(t, t.Context(), `{`+base+`, "insecureKubeconfig": {"files": true}}`)
	waitImported(t, stalledClusters[0], 0)
	if agentDeployment(t, ds, stalledClusters[0].Spec.AgentNamespace) == nil {
		t.Error("no agent after the opt-in")
	}
}

// TestCluster_KubeconfigOfAnotherWorkspaceIsNotReachable: a Cluster may use
// a kubeconfig Secret of its own namespace only. The API server refuses a
// user who cannot read the other Secret (the admission policy), and the
// controller refuses everyone until its configuration lists the namespace.
func TestCluster_KubeconfigOfAnotherWorkspaceIsNotReachable(t *testing.T) {
	ds := env.Downstreams[0]
	victim := testenv.Namespace(t, up, "fleet-victim-")
	if err := up.Create(t.Context(), ds.KubeconfigSecret(victim, "kc")); err != nil {
		t.Fatal(err)
	}
	attacker := testenv.Namespace(t, up, "fleet-attacker-")

	// A workspace user: may manage Clusters in their workspace, nothing else.
	user := workspaceUser(t, attacker, rbacv1.PolicyRule{APIGroups: []string{fleet.GroupVersion.Group}, Resources: []string{"clusters"}, Verbs: []string{"*"}})
	c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: attacker, Name: "stolen"},
		Spec: fleet.ClusterSpec{KubeConfigSecret: "kc", KubeConfigSecretNamespace: victim, AgentNamespace: "agent-" + attacker}}
	err := user.Create(t.Context(), c.DeepCopy())
	if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) || !strings.Contains(fmt.Sprint(err), "only a user who may read Secret "+victim+"/kc") {
		t.Fatalf("a workspace user pointed a Cluster at another workspace's kubeconfig: %v", err)
	}

	// An admin may write it (they can read the Secret), but the controller
	// does not use it unless its configuration says so.
	if err := up.Create(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	got := waitCondition(t, c, fleet.StalledCondition, metav1.ConditionTrue, fleet.NamespaceNotAllowedReason)
	if msg := findCondition(got, fleet.ReadyCondition).Message; !strings.Contains(msg, "kubeConfigSecretNamespaces") {
		t.Errorf("the message must say how to allow it: %s", msg)
	}
	if err := ds.Client.Get(t.Context(), client.ObjectKey{Name: c.Spec.AgentNamespace}, &corev1.Namespace{}); !apierrors.IsNotFound(err) {
		t.Errorf("the agent was pushed with another workspace's kubeconfig: %v", err)
	}

	const base = `"apiServerURL": "https://upstream.example.com:6443", "apiServerCA": "dXBzdHJlYW0tY2E="`
	t.Cleanup(func() { setControllerConfig(t, context.Background(), "{"+base+"}") })
	setControllerConfig(t, t.Context(), fmt.Sprintf(`{%s, "kubeConfigSecretNamespaces": {%q: [%q]}}`, base, attacker, victim))
	waitImported(t, c, 0)
}

// workspaceUser is a client acting as a ServiceAccount that holds rules in
// namespace ns only.
func workspaceUser(t *testing.T, ns string, rules ...rbacv1.PolicyRule) client.Client {
	t.Helper()
	ctx := t.Context()
	objs := []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "user"}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "user"}, Rules: rules},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "user"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "user"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "user"}}},
	}
	for _, o := range objs {
		if err := up.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	tok, err := env.Upstream.ServiceAccountToken(ctx, ns, "user", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(env.Upstream.ConfigForToken(tok), client.Options{Scheme: controlplane.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestImport_PreexistingDownstreamNamespaceIsNeverTakenOver: the push
// creates (and marks as fleet's) the agent's namespace only when it does not
// exist; one that was there before is not labelled, and deleting the Cluster
// removes the agent but not that namespace or what else is in it.
func TestImport_PreexistingDownstreamNamespaceIsNeverTakenOver(t *testing.T) {
	ds := env.Downstreams[1]
	pre := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "preexisting-", Labels: map[string]string{"team": "platform"}}}
	if err := ds.Client.Create(t.Context(), pre); err != nil {
		t.Fatal(err)
	}
	agentNS := pre.Name
	theirs := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: agentNS, Name: "theirs"}, Data: map[string]string{"a": "b"}}
	if err := ds.Client.Create(t.Context(), theirs); err != nil {
		t.Fatal(err)
	}
	c := managerCluster(t, ds, func(c *fleet.Cluster) { c.Spec.AgentNamespace = agentNS })
	waitImported(t, c, 0)
	ns := &corev1.Namespace{}
	if err := ds.Client.Get(t.Context(), client.ObjectKey{Name: agentNS}, ns); err != nil {
		t.Fatal(err)
	}
	if _, ok := ns.Labels[fleet.ManagedLabel]; ok || ns.Labels["team"] != "platform" {
		t.Errorf("the push changed the labels of a namespace it did not create: %v", ns.Labels)
	}

	if err := up.Delete(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "agent removed downstream", func() error {
		err := ds.Client.Get(t.Context(), client.ObjectKey{Namespace: agentNS, Name: "fleet-agent"}, &appsv1.Deployment{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("agent Deployment: %v", err)
	})
	if err := ds.Client.Get(t.Context(), client.ObjectKey{Name: agentNS}, ns); err != nil || !ns.DeletionTimestamp.IsZero() {
		t.Errorf("the pre-existing namespace was deleted with the Cluster: %v (deletion %v)", err, ns.DeletionTimestamp)
	}
	if err := ds.Client.Get(t.Context(), client.ObjectKeyFromObject(theirs), &corev1.ConfigMap{}); err != nil {
		t.Errorf("what else was in the namespace is gone: %v", err)
	}
}

// TestCluster_NamespaceMadeForAnotherClusterIsNeverShared: a per-cluster
// namespace is reused only when it was made for the same Cluster. Names are
// shortened with a short hash, so a chosen name could produce another
// Cluster's namespace name: that is a conflict, and nothing is deployed
// into the other cluster's namespace.
func TestCluster_NamespaceMadeForAnotherClusterIsNeverShared(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-nsclash-")
	ns := names.NewClusterNamespace("another-workspace", "another-cluster")
	ns.Name = names.ClusterNamespace(ws, "clash")
	if err := up.Create(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, ws, "clash", map[string]string{"env": "x"})
	// A conflict with another object (not with the Cluster itself): the
	// Cluster waits, and is looked at again, until a person resolves it.
	got := waitCondition(t, c, fleet.ReconcilingCondition, metav1.ConditionTrue, fleet.NamespaceConflictReason)
	if msg := findCondition(got, fleet.ReadyCondition).Message; !strings.Contains(msg, "another-workspace/another-cluster") {
		t.Errorf("the message must name whose namespace it is: %s", msg)
	}
	if st := findCondition(got, fleet.StalledCondition); st != nil {
		t.Errorf("Stalled: %+v", st)
	}
	b := webBundle(ws)
	b.Spec.Targets = []fleet.BundleTarget{{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "x"}}}}
	if err := up.Create(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	// A second Cluster in the workspace gets the Bundle: once it has it,
	// the Bundle reconciler has passed over the conflicting one too.
	newCluster(t, ws, "fine", map[string]string{"env": "x"})
	waitDeployedTo(t, ws, b.Name, "fine")
	list := &fleet.BundleDeploymentList{}
	if err := up.List(t.Context(), list, client.InNamespace(ns.Name)); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 0 {
		t.Errorf("a BundleDeployment was written into another cluster's namespace: %d", len(list.Items))
	}
}

// TestBundle_NeverReachesAnotherWorkspace: SPEC §6, a Bundle author deploys
// to the clusters of the Bundle's own workspace only, whatever the targets
// say: a selector that matches everything, and a Cluster of another
// workspace named outright.
func TestBundle_NeverReachesAnotherWorkspace(t *testing.T) {
	mine := testenv.Namespace(t, up, "fleet-mine-")
	theirs := testenv.Namespace(t, up, "fleet-theirs-")
	newCluster(t, mine, "own", map[string]string{"env": "prod"})
	newCluster(t, theirs, "other", map[string]string{"env": "prod"})
	// A Bundle of their own reaches the other cluster: its namespace is
	// there and usable.
	own := webBundle(theirs)
	own.Name = "theirs"
	own.Spec.Targets = []fleet.BundleTarget{{ClusterSelector: &metav1.LabelSelector{}}}
	if err := up.Create(t.Context(), own); err != nil {
		t.Fatal(err)
	}
	waitDeployedTo(t, theirs, own.Name, "other")
	b := webBundle(mine)
	b.Spec.Targets = []fleet.BundleTarget{
		{ClusterName: "other"},
		{ClusterSelector: &metav1.LabelSelector{}},
	}
	if err := up.Create(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	waitDeployedTo(t, mine, b.Name, "own")
	list := &fleet.BundleDeploymentList{}
	if err := up.List(t.Context(), list, client.InNamespace(names.ClusterNamespace(theirs, "other"))); err != nil {
		t.Fatal(err)
	}
	for _, bd := range list.Items {
		if bd.Labels[fleet.BundleNamespaceLabel] != theirs {
			t.Errorf("a Bundle of %s reached a cluster of %s: BundleDeployment %s", bd.Labels[fleet.BundleNamespaceLabel], theirs, bd.Name)
		}
	}
}
