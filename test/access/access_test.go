// Package access_test runs cluster access through the manager end to end
// with its real parts (docs/design/cluster-access.md, "Wired together"): two
// envtest control planes, fleet-proxy in the test process behind the real
// upstream aggregator with the tunnel server and the identity mapping of
// cmd/fleet's `fleet proxy`, and an agent played by the test process: a
// tunnel Client authenticated as a request identity set up as a grant
// leaves it, serving the agent's access handler, which talks to the
// downstream API server.
package access_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	clustercontroller "github.com/gitops-fleet/fleet/controller/cluster"
	"github.com/gitops-fleet/fleet/dev/controlplane"
	"github.com/gitops-fleet/fleet/dev/proxyenv"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/reconciler"
	"github.com/gitops-fleet/fleet/internal/scheme"
	"github.com/gitops-fleet/fleet/internal/tunnel"
	"github.com/gitops-fleet/fleet/proxy"
	"github.com/gitops-fleet/fleet/proxy/connected"
)

const (
	proxyNamespace = "fleet-system"
	workspace      = "fleet-default"
)

// replica is the in-process fleet-proxy's name in the Connected condition.
const replica = "fleet-proxy-test-0"

var (
	env     *controlplane.Env
	tunnels *proxy.TunnelServer
	logs    *testenv.Logs
	// fleet-proxy's identity with the chart's rights for the status.
	proxyClient    client.Client
	proxyClientset kubernetes.Interface
	// fleet-proxy's registry of direct tokens.
	registry *proxy.Registry
	// proxyKey is fleet-proxy's private signing key.
	proxyKey ed25519.PrivateKey
)

// proxyIdentity is a ServiceAccount fleet-proxy with the rules the chart
// gives fleet-proxy (charts/fleet/templates/proxy.yaml: its ClusterRole and
// Role, auth-delegator, the extension-apiserver-authentication reader; the
// chart test in cmd/fleet pins them), and clients acting as it.
func proxyIdentity(ctx context.Context) (client.Client, kubernetes.Interface, *rest.Config, error) {
	c := env.Upstream.Client
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: proxyNamespace, Name: "fleet-proxy"}}
	subjects := []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: proxyNamespace, Name: sa.Name}}
	objs := []client.Object{
		sa,
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "fleet-proxy"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
			{APIGroups: []string{"apiregistration.k8s.io"}, Resources: []string{"apiservices"}, ResourceNames: []string{"v1alpha1.proxy.fleet.cattle.io"}, Verbs: []string{"get", "patch"}},
			{APIGroups: []string{""}, Resources: []string{"serviceaccounts"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"fleet.cattle.io"}, Resources: []string{"clusterregistrations", "clusters"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}},
			{APIGroups: []string{"fleet.cattle.io"}, Resources: []string{"clusters/status"}, Verbs: []string{"patch"}},
			{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "fleet-proxy"},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "fleet-proxy"}, Subjects: subjects},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "fleet-proxy:auth-delegator"},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:auth-delegator"}, Subjects: subjects},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "fleet-proxy:extension-apiserver-authentication-reader"},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "extension-apiserver-authentication-reader"}, Subjects: subjects},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: proxyNamespace, Name: "fleet-proxy"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"fleet-proxy-tls", "fleet-proxy-peer"}, Verbs: []string{"get"}},
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create"}},
			{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"fleet-proxy-signing"}, Verbs: []string{"delete"}},
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"fleet-proxy-signing-keys"}, Verbs: []string{"get", "list", "watch", "update"}},
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch", "create", "update", "delete"}},
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}},
		}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: proxyNamespace, Name: "fleet-proxy"},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "fleet-proxy"}, Subjects: subjects},
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			return nil, nil, nil, err
		}
	}
	tok, err := env.Upstream.ServiceAccountToken(ctx, sa.Namespace, sa.Name, 2*time.Hour)
	if err != nil {
		return nil, nil, nil, err
	}
	cfg := env.Upstream.ConfigForToken(tok)
	pc, err := client.New(cfg, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		return nil, nil, nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	return pc, cs, cfg, nil
}

func TestMain(m *testing.M) {
	webhookFlags, err := startTokenWebhook()
	if err != nil {
		panic(err)
	}
	testenv.Main(m, testenv.Options{
		ControlPlanes: &controlplane.Options{Downstreams: 1, NoControllerManager: true, DownstreamAPIServerFlags: webhookFlags},
		CaptureLogs:   true,
	}, setup)
}

// setup runs fleet-proxy as `fleet proxy` does (tunnel server, identity
// cache, signing keys) and registers it as the chart does (Service,
// EndpointSlice to this process, APIService, the entry right).
func setup(s *testenv.Suite) error {
	env, logs = s.Env, s.Logs
	up := env.Upstream
	ctx := s.Context()

	host, err := controlplane.AggregatedServerHost()
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return err
	}
	port := l.Addr().(*net.TCPAddr).Port
	certPEM, keyPEM, err := proxyenv.ServingCert(proxyNamespace, host)
	if err != nil {
		return err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return err
	}
	for _, ns := range []string{proxyNamespace, workspace} {
		if err := up.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return err
		}
	}
	// fleet-proxy's key, kept by the test to make tokens fleet-proxy
	// would never issue (signingKey).
	if _, proxyKey, err = ed25519.GenerateKey(rand.Reader); err != nil {
		return err
	}
	// fleet-proxy as `fleet proxy` runs it (proxy.New), as a
	// ServiceAccount with the chart's rights, with a short sweep of the
	// Connected condition and a recheck of direct tokens every 500 ms:
	// the tests wait for both.
	var proxyConfig *rest.Config
	if proxyClient, proxyClientset, proxyConfig, err = proxyIdentity(ctx); err != nil {
		return err
	}
	p, err := proxy.New(proxy.Options{Config: proxyConfig, Namespace: proxyNamespace, Replica: replica,
		Listener: l, Certificate: &cert, ServingCA: certPEM, SigningKey: proxyKey,
		Registerer: prometheus.NewRegistry(), Log: ctrllog.Log,
		ConnectedSweepInterval: 2 * time.Second, DirectRecheckInterval: 500 * time.Millisecond})
	if err != nil {
		return err
	}
	tunnels, registry = p.Tunnels(), p.Registry()
	s.Go("fleet-proxy", p.Run)
	select {
	case <-p.Started():
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(2 * time.Minute):
		return errors.New("fleet-proxy did not start within 2 minutes")
	}

	// What the chart installs, pointing at this test process.
	return proxyenv.Register(ctx, up.Client, up.Clientset, proxyNamespace, host, port, certPEM)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// agentIdentity makes what a grant of registration reg leaves for Cluster
// workspace/cluster (controller/registration): the Cluster with its
// status.namespace, the cluster namespace, the granted registration owned
// by the Cluster, its request ServiceAccount, and the workspace Role's
// attach right, here on attachable (the grant gives only the own Cluster).
// It returns a token of the request identity.
func agentIdentity(t *testing.T, cluster, reg string, attachable ...string) string {
	t.Helper()
	sa, err := proxyenv.AgentIdentity(t.Context(), env.Upstream.Client, workspace, cluster, reg, attachable...)
	must(t, err)
	tok, err := env.Upstream.ServiceAccountToken(t.Context(), sa.Namespace, sa.Name, time.Hour)
	must(t, err)
	return tok
}

// upstreamUser is an upstream ServiceAccount; it returns its user name and
// a client-go clientset for Cluster cluster through fleet-proxy.
func upstreamUser(t *testing.T, ns, name, cluster string) (string, kubernetes.Interface, string) {
	t.Helper()
	ctx := t.Context()
	if err := env.Upstream.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	must(t, env.Upstream.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}))
	tok, err := env.Upstream.ServiceAccountToken(ctx, ns, name, time.Hour)
	must(t, err)
	cfg := env.Upstream.ConfigForToken(tok)
	cfg.Host = strings.TrimSuffix(cfg.Host, "/") + "/apis/" + proxy.GroupVersion + "/namespaces/" + workspace + "/clusters/" + cluster + "/proxy"
	cs, err := kubernetes.NewForConfig(cfg)
	must(t, err)
	return "system:serviceaccount:" + ns + ":" + name, cs, tok
}

func upstreamTLS(t *testing.T) *tls.Config {
	t.Helper()
	pool, err := certutil.NewPoolFromBytes(env.Upstream.Config.CAData)
	must(t, err)
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
}

// attach opens an attach WebSocket for cluster as token and returns the
// handshake's status and body (the connection is closed at once).
func attach(t *testing.T, cluster, token string) (int, string) {
	t.Helper()
	u, err := tunnel.AttachURL(env.Upstream.Config.Host, workspace, cluster)
	must(t, err)
	d := &websocket.Dialer{TLSClientConfig: upstreamTLS(t), HandshakeTimeout: 10 * time.Second}
	conn, resp, err := d.DialContext(t.Context(), u, http.Header{"Authorization": []string{"Bearer " + token}})
	if err == nil {
		_ = conn.Close()
		return resp.StatusCode, ""
	}
	if resp == nil {
		t.Fatalf("attach %s: %v", cluster, err)
	}
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func statusOf(err error) string {
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		return fmt.Sprintf("%d %s", st.Status().Code, st.Status().Message)
	}
	return fmt.Sprint(err)
}

func TestUserReachesDownstreamThroughTheTunnel(t *testing.T) {
	ctx := t.Context()
	up, down := env.Upstream, env.Downstreams[0]
	const clusterA, clusterB = "cluster-a", "cluster-b"
	keyA := workspace + "/" + clusterA

	agentA := agentIdentity(t, clusterA, "reg-a", clusterA)
	// Cluster B's agent may, by a faulty upstream Role, pass the API server
	// with an attach to Cluster A too: only fleet-proxy's mapping stops it.
	agentB := agentIdentity(t, clusterB, "reg-b", clusterB, clusterA)

	aliceName, alice, aliceTok := upstreamUser(t, "users", "alice", clusterA)
	_, mallory, malloryTok := upstreamUser(t, "users", "mallory", clusterA)
	// Alice's upstream right: fleet.cattle.io clusters/proxy on Cluster A.
	must(t, up.Client.Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: workspace, Name: "alice-proxy"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"fleet.cattle.io"}, Resources: []string{"clusters/proxy"},
			ResourceNames: []string{clusterA}, Verbs: []string{"get", "create", "update", "patch", "delete"}}},
	}))
	must(t, up.Client.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: workspace, Name: "alice-proxy"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "alice-proxy"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: aliceName}},
	}))

	// Downstream: fleet:<alice> may list pods in team-a, nothing in team-b.
	for _, ns := range []string{"team-a", "team-b"} {
		must(t, down.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}
	must(t, down.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "marker"}}))
	// A pod to find (no controller manager: its ServiceAccount by hand).
	must(t, down.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "default"}}))
	must(t, down.Client.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "web"},
		Spec: corev1.PodSpec{AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{Name: "web", Image: "registry.example/web:1"}}},
	}))
	must(t, down.Client.Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "pod-reader"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}}},
	}))
	must(t, down.Client.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "pod-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "pod-reader"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "fleet:" + aliceName}},
	}))
	downUser := "fleet:" + aliceName

	// Before the agent connects: 503 for a user with the right.
	testenv.Eventually(t, 30*time.Second, "503 before the agent connects", func() error {
		_, err := alice.CoreV1().Pods("team-a").List(ctx, metav1.ListOptions{})
		if apierrors.IsServiceUnavailable(err) {
			return nil
		}
		return fmt.Errorf("want 503, got %s", statusOf(err))
	})

	// Without the upstream right: 403 from fleet-proxy.
	_, err := mallory.CoreV1().Pods("team-a").List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "clusters/proxy") {
		t.Fatalf("a user without clusters/proxy: want fleet-proxy's 403, got %s", statusOf(err))
	}

	// Cluster B's agent identity cannot attach as Cluster A (403 from the
	// tunnel server, not the API server), but may attach as its own.
	testenv.Eventually(t, 30*time.Second, "cluster B's agent refused as cluster A by fleet-proxy", func() error {
		code, body := attach(t, clusterA, agentB)
		if code == http.StatusForbidden && strings.Contains(body, "may not hold the tunnel") {
			return nil
		}
		return fmt.Errorf("status %d: %s", code, body)
	})
	testenv.Eventually(t, 30*time.Second, "cluster B's agent attaches as cluster B", func() error {
		if code, body := attach(t, clusterB, agentB); code != http.StatusSwitchingProtocols {
			return fmt.Errorf("status %d: %s", code, body)
		}
		return nil
	})
	if tunnels.Server.HasSession(keyA) {
		t.Fatalf("cluster A has a session before its agent connected")
	}

	// The agent of Cluster A: tunnel client + access handler to the
	// downstream API server, keys read through the upstream as the agent.
	a, err := proxyenv.NewAgent(ctx, proxyenv.AgentOptions{Upstream: up.Config, Token: agentA,
		Workspace: workspace, Cluster: clusterA, Local: down.Config})
	must(t, err)
	agent := a.Tunnel
	agentRun := testenv.Start(t, "agent tunnel", agent.Run)
	testenv.Eventually(t, 30*time.Second, "cluster A's tunnel", func() error {
		if !tunnels.Server.HasSession(keyA) || !agent.Connected() {
			return fmt.Errorf("not connected (sessions %d)", tunnels.Server.Sessions(keyA))
		}
		return nil
	})

	// Alice lists pods in team-a through the upstream: served downstream
	// as fleet:<alice>.
	testenv.Eventually(t, 30*time.Second, "alice lists pods in team-a", func() error {
		pods, err := alice.CoreV1().Pods("team-a").List(ctx, metav1.ListOptions{})
		if err != nil {
			return errors.New(statusOf(err))
		}
		if len(pods.Items) != 1 || pods.Items[0].Name != "web" {
			return fmt.Errorf("want pod web, got %d pods", len(pods.Items))
		}
		return nil
	})
	// In team-b downstream RBAC refuses fleet:<alice>.
	_, err = alice.CoreV1().Pods("team-b").List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), downUser) {
		t.Fatalf("team-b: want the downstream's 403 for %s, got %s", downUser, statusOf(err))
	}
	// Nor may she read what pod-reader does not grant.
	if _, err := alice.CoreV1().ConfigMaps("team-a").Get(ctx, "marker", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("configmaps in team-a: want the downstream's 403, got %s", statusOf(err))
	}
	// Mallory still gets fleet-proxy's 403 now that the cluster is
	// connected.
	if _, err := mallory.CoreV1().Pods("team-a").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "clusters/proxy") {
		t.Fatalf("a user without clusters/proxy after connect: want fleet-proxy's 403, got %s", statusOf(err))
	}
	if n := tunnels.Server.Sessions(keyA); n != 1 {
		t.Errorf("cluster A has %d sessions, want 1 (only its own agent)", n)
	}

	// The agent goes: 503 again.
	must(t, agentRun.Stop(10*time.Second))
	testenv.Eventually(t, 30*time.Second, "503 after the agent went", func() error {
		_, err := alice.CoreV1().Pods("team-a").List(ctx, metav1.ListOptions{})
		if apierrors.IsServiceUnavailable(err) {
			return nil
		}
		return fmt.Errorf("want 503, got %s", statusOf(err))
	})

	for name, tok := range map[string]string{"alice": aliceTok, "mallory": malloryTok, "agent A": agentA, "agent B": agentB} {
		if strings.Contains(logs.String(), tok) {
			t.Errorf("the token of %s is in the log", name)
		}
	}
}

// connectedCondition reads the Cluster's Connected condition (nil: none).
func connectedCondition(ctx context.Context, cluster string) (*metav1.Condition, error) {
	cl := &fleet.Cluster{}
	if err := env.Upstream.Client.Get(ctx, client.ObjectKey{Namespace: workspace, Name: cluster}, cl); err != nil {
		return nil, err
	}
	return meta.FindStatusCondition(cl.Status.Conditions, fleet.ConnectedCondition), nil
}

// waitConnected waits (bounded) for the Cluster's Connected condition to
// have status and reason, and returns it.
func waitConnected(t *testing.T, cluster string, status metav1.ConditionStatus, reason string) *metav1.Condition {
	t.Helper()
	var got *metav1.Condition
	testenv.Eventually(t, 30*time.Second, fmt.Sprintf("Connected=%s (%s) on %s", status, reason, cluster), func() error {
		c, err := connectedCondition(t.Context(), cluster)
		if err != nil {
			return err
		}
		if c == nil || c.Status != status || c.Reason != reason {
			return fmt.Errorf("condition %+v", c)
		}
		got = c
		return nil
	})
	return got
}

// waitEvent waits (bounded) for an event of fleet-proxy with reason on the
// Cluster.
func waitEvent(t *testing.T, cluster, typ, reason string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, fmt.Sprintf("event %s on %s", reason, cluster), func() error {
		list, err := env.Upstream.Clientset.EventsV1().Events(workspace).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Regarding.Kind == "Cluster" && e.Regarding.Name == cluster && e.Reason == reason && e.Type == typ &&
				e.ReportingController == "fleet-proxy" {
				return nil
			}
		}
		return fmt.Errorf("none among %d events", len(list.Items))
	})
}

// The Cluster shows whether its agent's tunnel is up: Connected=True
// naming the replica while the agent is connected, False (after a short
// grace) once it went, with events; the controller's status patch keeps
// the condition.
func TestConnectedConditionFollowsTheTunnel(t *testing.T) {
	ctx := t.Context()
	up := env.Upstream
	const cluster = "cluster-c"
	key := workspace + "/" + cluster
	tok := agentIdentity(t, cluster, "reg-c", cluster)

	if c, err := connectedCondition(ctx, cluster); err != nil || c != nil {
		t.Fatalf("Connected before any agent: %+v %v", c, err)
	}
	attachURL, err := tunnel.AttachURL(up.Config.Host, workspace, cluster)
	must(t, err)
	agent := &tunnel.Client{
		URL:        attachURL,
		Token:      func(context.Context) (string, error) { return tok, nil },
		TLS:        upstreamTLS(t),
		Handler:    http.NotFoundHandler(),
		MinBackoff: 50 * time.Millisecond, MaxBackoff: time.Second,
	}
	agentRun := testenv.Start(t, "agent tunnel", agent.Run)
	upCond := waitConnected(t, cluster, metav1.ConditionTrue, fleet.TunnelUpReason)
	if connected.HolderOf(upCond) != replica || !strings.Contains(upCond.Message, replica) {
		t.Errorf("Connected=True does not name the replica %s: %q", replica, upCond.Message)
	}
	waitEvent(t, cluster, corev1.EventTypeNormal, connected.ConnectedEvent)

	// The condition is fleet-proxy's, by server-side apply.
	cl := &fleet.Cluster{}
	must(t, up.Client.Get(ctx, client.ObjectKey{Namespace: workspace, Name: cluster}, cl))
	var byProxy bool
	for _, m := range cl.ManagedFields {
		if m.Manager == connected.FieldManager && m.Operation == metav1.ManagedFieldsOperationApply && m.Subresource == "status" {
			byProxy = true
		}
	}
	if !byProxy {
		t.Errorf("no status apply by %s in %+v", connected.FieldManager, cl.ManagedFields)
	}

	// A status patch of the Cluster controller (its owned conditions)
	// neither removes nor changes it.
	patcher, err := reconciler.NewStatusPatcher(up.Client, cl, clustercontroller.OwnedConditions...)
	must(t, err)
	cl.Status.Conditions = nil // a pass that sets only what it owns
	meta.SetStatusCondition(&cl.Status.Conditions, metav1.Condition{Type: fleet.ReadyCondition, Status: metav1.ConditionFalse,
		Reason: fleet.OfflineReason, Message: "written by a controller pass"})
	must(t, patcher.Patch(ctx, cl))
	after, err := connectedCondition(ctx, cluster)
	must(t, err)
	if after == nil || after.Status != upCond.Status || after.Reason != upCond.Reason || after.Message != upCond.Message ||
		!after.LastTransitionTime.Equal(&upCond.LastTransitionTime) {
		t.Errorf("after the controller's patch: %+v, want %+v", after, upCond)
	}

	// Another replica that does not see this one's session (no peering)
	// wrote False: the replica holding the tunnel sets True again.
	must(t, up.Client.Get(ctx, client.ObjectKey{Namespace: workspace, Name: cluster}, cl))
	meta.SetStatusCondition(&cl.Status.Conditions, metav1.Condition{Type: fleet.ConnectedCondition, Status: metav1.ConditionFalse,
		Reason: fleet.TunnelDownReason, Message: "written by another replica"})
	must(t, up.Client.Status().Update(ctx, cl))
	if again := waitConnected(t, cluster, metav1.ConditionTrue, fleet.TunnelUpReason); connected.HolderOf(again) != replica {
		t.Errorf("Connected=True again does not name %s: %q", replica, again.Message)
	}

	// The agent goes: False, with what to check, after the grace.
	wentAt := time.Now()
	must(t, agentRun.Stop(10*time.Second))
	downCond := waitConnected(t, cluster, metav1.ConditionFalse, fleet.TunnelDownReason)
	if took := time.Since(wentAt); took < connected.DefaultGrace-time.Second {
		t.Errorf("Connected=False %s after the agent went, before the grace of %s", took, connected.DefaultGrace)
	}
	if !strings.Contains(downCond.Message, "No agent tunnel since") || !strings.Contains(downCond.Message, "fleet-agent pods") ||
		!strings.Contains(downCond.Message, "cattle-fleet-system") {
		t.Errorf("Connected=False message %q", downCond.Message)
	}
	waitEvent(t, cluster, corev1.EventTypeWarning, connected.DisconnectedEvent)

	// fleet-proxy's rights stop at the status: its identity may not
	// change the Cluster itself nor delete it.
	must(t, proxyClient.Get(ctx, client.ObjectKey{Namespace: workspace, Name: cluster}, cl))
	cl.Spec.Paused = true
	if err := proxyClient.Update(ctx, cl); !apierrors.IsForbidden(err) {
		t.Errorf("fleet-proxy updating a Cluster's spec: want 403, got %v", err)
	}
	if err := proxyClient.Delete(ctx, cl); !apierrors.IsForbidden(err) {
		t.Errorf("fleet-proxy deleting a Cluster: want 403, got %v", err)
	}
	if tunnels.Server.Held(key) {
		t.Error("the tunnel is held after the agent went")
	}
	// The Ready the controller wrote is still there: fleet-proxy's apply
	// touches only its condition.
	must(t, up.Client.Get(ctx, client.ObjectKey{Namespace: workspace, Name: cluster}, cl))
	if r := meta.FindStatusCondition(cl.Status.Conditions, fleet.ReadyCondition); r == nil || r.Message != "written by a controller pass" {
		t.Errorf("Ready after fleet-proxy's writes: %+v", r)
	}
}

// A replica ends Connected=True conditions that name a replica whose pod
// is gone, and leaves those of a replica that runs.
func TestConnectedOfAGoneReplicaIsEnded(t *testing.T) {
	ctx := t.Context()
	c := env.Upstream.Client
	setTrue := func(cluster, holder string) {
		t.Helper()
		cl := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: workspace, Name: cluster}}
		must(t, c.Create(ctx, cl))
		meta.SetStatusCondition(&cl.Status.Conditions, metav1.Condition{Type: fleet.ConnectedCondition, Status: metav1.ConditionTrue,
			Reason: fleet.TunnelUpReason, Message: "The agent's tunnel is held by fleet-proxy replica " + holder})
		must(t, c.Status().Update(ctx, cl))
	}
	// A live replica: its pod runs (no kubelet here: the status by hand).
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: proxyNamespace, Name: "fleet-proxy-live-1"},
		Spec: corev1.PodSpec{AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{Name: "fleet-proxy", Image: "registry.example/fleet:1"}}},
	}
	must(t, env.Upstream.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: proxyNamespace, Name: "default"}}))
	must(t, c.Create(ctx, pod))
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{
		Name: "fleet-proxy", Image: "registry.example/fleet:1", ImageID: "registry.example/fleet@sha256:00",
		Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}},
	}}}
	must(t, c.Status().Update(ctx, pod))

	setTrue("cluster-gone", "fleet-proxy-gone-0")
	setTrue("cluster-live", pod.Name)

	down := waitConnected(t, "cluster-gone", metav1.ConditionFalse, fleet.TunnelDownReason)
	if !strings.Contains(down.Message, "fleet-agent pods") {
		t.Errorf("message %q", down.Message)
	}
	// Several sweeps later the live replica's True is still there.
	time.Sleep(5 * time.Second)
	live, err := connectedCondition(ctx, "cluster-live")
	must(t, err)
	if live == nil || live.Status != metav1.ConditionTrue || connected.HolderOf(live) != pod.Name {
		t.Errorf("a running replica's Connected=True was changed: %+v", live)
	}
}

// TestAttach_BeforeTheClusterRecordsItsNamespace: the grant makes the
// Cluster, its namespace and the agent's identity; the Cluster reconciler
// writes status.namespace after it, while the agent, told of the grant,
// already attaches. fleet-proxy holds that tunnel (it does not refuse it
// until a status write it would not be told of), so the Cluster is
// reachable when its agent first reports it Ready.
func TestAttach_BeforeTheClusterRecordsItsNamespace(t *testing.T) {
	ctx := t.Context()
	const cluster = "cluster-fresh"
	tok := agentIdentity(t, cluster, "reg-fresh", cluster)
	cl := &fleet.Cluster{}
	must(t, env.Upstream.Client.Get(ctx, client.ObjectKey{Namespace: workspace, Name: cluster}, cl))
	cl.Status.Namespace = ""
	must(t, env.Upstream.Client.Status().Update(ctx, cl))
	testenv.Eventually(t, 30*time.Second, "the new Cluster's agent attached", func() error {
		if code, body := attach(t, cluster, tok); code != http.StatusSwitchingProtocols {
			return fmt.Errorf("status %d: %s", code, body)
		}
		return nil
	})
}
