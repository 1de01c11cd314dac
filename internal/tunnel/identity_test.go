package tunnel_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/controlplane"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/names"
	"github.com/gitops-fleet/fleet/internal/registration"
	"github.com/gitops-fleet/fleet/internal/tunnel"
)

// agentObjects makes what a grant leaves for registration reg of Cluster
// ws/cluster, as controller/registration makes it: the Cluster with its
// status.namespace, the cluster namespace, the registration (owned by the
// Cluster, granted or not) and its request ServiceAccount. It returns the
// ServiceAccount.
func agentObjects(t *testing.T, c client.Client, ws, cluster, reg string, granted bool) *corev1.ServiceAccount {
	t.Helper()
	ctx := t.Context()
	clusterNS := names.ClusterNamespace(ws, cluster)
	cl := &fleet.Cluster{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ws, Name: cluster}, cl); err != nil {
		cl = &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: cluster}, Spec: fleet.ClusterSpec{ClientID: "client-" + cluster}}
		must(t, c.Create(ctx, cl))
		cl.Status.Namespace = clusterNS
		must(t, c.Status().Update(ctx, cl))
		must(t, c.Create(ctx, names.NewClusterNamespace(ws, cluster)))
	}
	r := &fleet.ClusterRegistration{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: reg},
		Spec:       fleet.ClusterRegistrationSpec{ClientID: "client-" + cluster, ClientRandom: "random-0123456789-" + reg},
	}
	must(t, c.Create(ctx, r))
	// As the grant records it: the Cluster's name, granted or not yet.
	r.Status.ClusterName, r.Status.Granted = cl.Name, granted
	must(t, c.Status().Update(ctx, r))
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{
		Namespace: clusterNS, Name: registration.RequestServiceAccountName(reg),
		Labels: map[string]string{
			fleet.ManagedLabel:                      "true",
			registration.RegistrationLabel:          reg,
			registration.RegistrationNamespaceLabel: ws,
		},
		Annotations: map[string]string{
			fleet.ClusterRegistrationAnnotation:          reg,
			fleet.ClusterRegistrationNamespaceAnnotation: ws,
			fleet.ClusterAnnotation:                      cluster,
		},
	}}
	must(t, c.Create(ctx, sa))
	return sa
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func saUser(sa *corev1.ServiceAccount) string {
	return "system:serviceaccount:" + sa.Namespace + ":" + sa.Name
}

// TestIdentityMapping runs on a real kube-apiserver: the objects are the
// ones a grant leaves, read back through the API.
func TestIdentityMapping(t *testing.T) {
	env := testenv.StartControlPlanes(t, controlplane.Options{NoControllerManager: true})
	c := env.Upstream.Client
	ctx := t.Context()
	ws := testenv.Namespace(t, c, "ws-")
	saA := agentObjects(t, c, ws, "cluster-a", "reg-a", true)
	saB := agentObjects(t, c, ws, "cluster-b", "reg-b", true)
	// A registration of cluster A not (yet) granted: its identity holds
	// nothing.
	saPending := agentObjects(t, c, ws, "cluster-a", "reg-pending", false)
	// Another ServiceAccount in cluster A's namespace.
	other := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: saA.Namespace, Name: "default-ish"}}
	must(t, c.Create(ctx, other))
	// A ServiceAccount labelled for reg-a but not its request identity.
	impostor := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: saA.Namespace, Name: "request-reg-x", Labels: saA.Labels, Annotations: saA.Annotations}}
	must(t, c.Create(ctx, impostor))
	// A request ServiceAccount copied into another namespace, naming
	// cluster A: that namespace is not cluster A's.
	elsewhere := testenv.Namespace(t, c, "elsewhere-")
	copied := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: elsewhere, Name: saA.Name, Labels: saA.Labels, Annotations: saA.Annotations}}
	must(t, c.Create(ctx, copied))

	t.Run("a granted agent maps to its Cluster", func(t *testing.T) {
		for _, sa := range []*corev1.ServiceAccount{saA, saB} {
			want := ws + "/" + sa.Annotations[fleet.ClusterAnnotation]
			key, err := tunnel.ClusterForIdentity(ctx, c, saUser(sa), string(sa.UID))
			if err != nil || key != want {
				t.Fatalf("%s: key %q, %v; want %q", saUser(sa), key, err, want)
			}
			// Without a UID from the authenticator too.
			if key, err := tunnel.AuthorizeAttach(ctx, c, saUser(sa), "", ws, sa.Annotations[fleet.ClusterAnnotation]); err != nil || key != want {
				t.Fatalf("AuthorizeAttach %s: key %q, %v", saUser(sa), key, err)
			}
		}
	})

	// A Cluster the grant just made: no status.namespace yet (the Cluster
	// reconciler writes it after the grant). Its agent maps at once; a
	// status.namespace naming another namespace refuses it.
	saC := agentObjects(t, c, ws, "cluster-c", "reg-c", true)
	setStatusNamespace := func(ns string) {
		t.Helper()
		cl := &fleet.Cluster{}
		must(t, c.Get(ctx, client.ObjectKey{Namespace: ws, Name: "cluster-c"}, cl))
		cl.Status.Namespace = ns
		must(t, c.Status().Update(ctx, cl))
	}
	setStatusNamespace("")
	t.Run("an agent whose Cluster has no status.namespace yet maps to it", func(t *testing.T) {
		if key, err := tunnel.AuthorizeAttach(ctx, c, saUser(saC), string(saC.UID), ws, "cluster-c"); err != nil || key != ws+"/cluster-c" {
			t.Fatalf("key %q, %v", key, err)
		}
		// Not from another namespace, even with an empty status.namespace.
		moved := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: elsewhere, Name: saC.Name, Labels: saC.Labels, Annotations: saC.Annotations}}
		must(t, c.Create(ctx, moved))
		if key, err := tunnel.AuthorizeAttach(ctx, c, saUser(moved), "", ws, "cluster-c"); !errors.Is(err, tunnel.ErrNotAnAgent) {
			t.Fatalf("a copy of its request ServiceAccount in %s: key %q, error %v; want a refusal", elsewhere, key, err)
		}
	})
	setStatusNamespace(elsewhere)
	t.Run("refused: an agent whose Cluster's status.namespace names another namespace", func(t *testing.T) {
		if key, err := tunnel.AuthorizeAttach(ctx, c, saUser(saC), string(saC.UID), ws, "cluster-c"); !errors.Is(err, tunnel.ErrNotAnAgent) {
			t.Fatalf("key %q, error %v; want a refusal", key, err)
		}
	})

	refused := []struct {
		what, user, uid, cluster string
	}{
		{"agent of cluster A naming cluster B", saUser(saA), string(saA.UID), "cluster-b"},
		{"agent of cluster B naming cluster A", saUser(saB), "", "cluster-a"},
		{"agent of cluster A with another ServiceAccount's UID", saUser(saA), string(saB.UID), "cluster-a"},
		{"a registration that is not granted", saUser(saPending), string(saPending.UID), "cluster-a"},
		{"another ServiceAccount of the cluster namespace", saUser(other), string(other.UID), "cluster-a"},
		{"a ServiceAccount labelled for the registration but not its request identity", saUser(impostor), "", "cluster-a"},
		{"the request ServiceAccount's name in another namespace", saUser(copied), "", "cluster-a"},
		{"a ServiceAccount that does not exist", "system:serviceaccount:" + saA.Namespace + ":request-reg-gone", "", "cluster-a"},
		{"a plain user", "alice", "", "cluster-a"},
		{"a user named like a ServiceAccount prefix", "system:serviceaccount:", "", "cluster-a"},
		{"a malformed ServiceAccount user", "system:serviceaccount:" + saA.Namespace + ":" + saA.Name + ":x", "", "cluster-a"},
	}
	for _, tc := range refused {
		t.Run("refused: "+tc.what, func(t *testing.T) {
			key, err := tunnel.AuthorizeAttach(ctx, c, tc.user, tc.uid, ws, tc.cluster)
			if err == nil || !errors.Is(err, tunnel.ErrNotAnAgent) {
				t.Fatalf("key %q, error %v; want a refusal", key, err)
			}
		})
	}

	t.Run("the peer token comes from a Secret", func(t *testing.T) {
		short := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "peer-short"}, Data: map[string][]byte{tunnel.PeerTokenKey: []byte("short-secret-value")}}
		good := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "peer"}, Data: map[string][]byte{tunnel.PeerTokenKey: []byte(peerToken)}}
		must(t, c.Create(ctx, short))
		must(t, c.Create(ctx, good))
		if _, err := tunnel.PeerToken(ctx, c, client.ObjectKeyFromObject(short)); err == nil || strings.Contains(err.Error(), "short-secret-value") {
			t.Errorf("short token: %v", err)
		}
		if _, err := tunnel.PeerToken(ctx, c, client.ObjectKey{Namespace: ws, Name: "missing"}); err == nil {
			t.Error("no error for a missing Secret")
		}
		if got, err := tunnel.PeerToken(ctx, c, client.ObjectKeyFromObject(good)); err != nil || got != peerToken {
			t.Errorf("PeerToken = %q, %v", got, err)
		}
	})

	t.Run("a registration that is deleted holds nothing", func(t *testing.T) {
		reg := &fleet.ClusterRegistration{}
		must(t, c.Get(ctx, client.ObjectKey{Namespace: ws, Name: "reg-b"}, reg))
		reg.Finalizers = append(reg.Finalizers, "test.fleet.cattle.io/hold")
		must(t, c.Update(ctx, reg))
		must(t, c.Delete(ctx, reg))
		testenv.Eventually(t, 10*time.Second, "the agent of the deleted registration to be refused", func() (bool, error) {
			_, err := tunnel.ClusterForIdentity(ctx, c, saUser(saB), "")
			return errors.Is(err, tunnel.ErrNotAnAgent), nil
		})
		must(t, c.Get(ctx, client.ObjectKey{Namespace: ws, Name: "reg-b"}, reg))
		reg.Finalizers = nil
		must(t, c.Update(ctx, reg))
	})
}

func TestParseAttachPath(t *testing.T) {
	for path, want := range map[string][2]string{
		"/apis/proxy.fleet.cattle.io/v1alpha1/namespaces/fleet-default/clusters/c1/attach": {"fleet-default", "c1"},
		tunnel.AttachPath("ws", "name"):                                              {"ws", "name"},
		"/apis/proxy.fleet.cattle.io/v1alpha1/namespaces/ws/clusters/c1/proxy":       {},
		"/apis/proxy.fleet.cattle.io/v1alpha1/namespaces/ws/clusters/c1/attach/x":    {},
		"/apis/proxy.fleet.cattle.io/v1alpha1/namespaces//clusters/c1/attach":        {},
		"/apis/proxy.fleet.cattle.io/v1alpha1/namespaces/ws/clusters/a%2Fb/attach":   {},
		"/apis/fleet.cattle.io/v1alpha1/namespaces/ws/clusters/c1/attach":            {},
		"/apis/proxy.fleet.cattle.io/v1alpha1/namespaces/ws/clustergroups/c1/attach": {},
	} {
		ws, name, ok := tunnel.ParseAttachPath(path)
		if ok != (want[0] != "") || ws != want[0] || name != want[1] {
			t.Errorf("ParseAttachPath(%q) = %q, %q, %v; want %q", path, ws, name, ok, want)
		}
	}
}
