package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/watch"
	corev1apply "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/utils/ptr"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/devenv"
	"github.com/gitops-fleet/fleet/internal/registration"
)

// The access tests play upstream users, each a client certificate the
// upstream's CA issues: the user alice-<cluster> in group team-a may use
// clusters/proxy on that one Cluster; a Bundle gives Group fleet:team-a
// view rights in namespace team-a downstream (plus exec and port-forward
// there) and runs a workload in it.
const (
	teamNS     = "team-a"
	teamGroup  = "team-a"
	accessPath = "/apis/" + registration.ProxyAPIGroup + "/v1alpha1/namespaces/"
)

// proxyConfig is cfg (an upstream user) aimed at cluster's proxy URL.
func proxyConfig(cfg *rest.Config, clusterName string) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Host = strings.TrimSuffix(c.Host, "/") + accessPath + ws + "/clusters/" + clusterName + "/proxy"
	return c
}

func upstreamUser(t *testing.T, name string, groups ...string) *rest.Config {
	t.Helper()
	cfg, err := cluster("upstream").UserConfig(name, groups...)
	must(t, err)
	return cfg
}

func kube(t *testing.T, cfg *rest.Config) *kubernetes.Clientset {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	must(t, err)
	return cs
}

// teamBundle is what a platform team commits to give team-a its rights
// downstream: fleet:<group> names, never the upstream ones.
func teamBundle(targets ...string) *fleet.Bundle {
	resources := `apiVersion: v1
kind: Namespace
metadata:
  name: team-a
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: team-a-view
  namespace: team-a
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: view
subjects:
  - apiGroup: rbac.authorization.k8s.io
    kind: Group
    name: fleet:team-a
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: team-a-debug
  namespace: team-a
rules:
  - apiGroups: [""]
    resources: ["pods/exec", "pods/portforward"]
    verbs: ["create", "get"]
  - apiGroups: [""]
    resources: ["configmaps"]
    verbs: ["create", "update", "patch", "delete"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: team-a-debug
  namespace: team-a
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: team-a-debug
subjects:
  - apiGroup: rbac.authorization.k8s.io
    kind: Group
    name: fleet:team-a
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: echo
  namespace: team-a
spec:
  replicas: 1
  selector:
    matchLabels: {app: echo}
  template:
    metadata:
      labels: {app: echo}
    spec:
      automountServiceAccountToken: false
      securityContext:
        runAsNonRoot: true
        runAsUser: 65535
      containers:
        - name: echo
          image: registry.k8s.io/pause:3.10
          imagePullPolicy: IfNotPresent
          args: ["serve", ":8080"]
          ports:
            - containerPort: 8080
`
	b := &fleet.Bundle{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "team-a-access"},
		Spec: fleet.BundleSpec{
			Resources: []fleet.BundleResource{{Name: "team-a.yaml", Content: resources}},
		},
	}
	for _, c := range targets {
		b.Spec.Targets = append(b.Spec.Targets, fleet.BundleTarget{ClusterName: c})
	}
	return b
}

// grantProxy lets user use clusters/proxy on exactly one Cluster (what
// ClusterRole fleet-cluster-proxy does per workspace, narrowed by name).
func grantProxy(t *testing.T, user, clusterName string) {
	t.Helper()
	name := "proxy-" + user
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: name},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{fleet.GroupVersion.Group}, Resources: []string{"clusters/proxy"},
			ResourceNames: []string{clusterName}, Verbs: []string{"get", "create", "update", "patch", "delete"}}},
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}},
	}
	must(t, up.Create(t.Context(), role))
	must(t, up.Create(t.Context(), binding))
}

// statusCode is the HTTP status of a client-go error (0 if none).
func statusCode(err error) int32 {
	if s, ok := err.(apierrors.APIStatus); ok {
		return s.Status().Code
	}
	return 0
}

// echoPod waits, through the proxy as the user, for the team's workload.
func echoPod(t *testing.T, cs *kubernetes.Clientset) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	must(t, devenv.Poll(t.Context(), 3*time.Minute, func() error {
		pods, err := cs.CoreV1().Pods(teamNS).List(t.Context(), metav1.ListOptions{LabelSelector: "app=echo"})
		if err != nil {
			return err
		}
		for i := range pods.Items {
			if podReady(&pods.Items[i]) {
				pod = &pods.Items[i]
				return nil
			}
		}
		return fmt.Errorf("no ready echo pod among %d", len(pods.Items))
	}))
	return pod
}

func testAccess(t *testing.T, dev2 string) {
	// name is the Cluster's, dev the dev cluster's (the agent-initiated
	// Cluster's name is made by the controller).
	clusters := []struct{ flow, name, dev string }{{"manager-initiated", "dev-1", "dev-1"}, {"agent-initiated", dev2, "dev-2"}}
	must(t, up.Create(t.Context(), teamBundle("dev-1", dev2)))
	for _, c := range clusters {
		grantProxy(t, "alice-"+c.name, c.name)
	}
	// A long watch on the agent-initiated cluster, checked after the
	// other tests (the team namespace comes with the Bundle: wait for it).
	longWatchUser := kube(t, proxyConfig(upstreamUser(t, "alice-"+dev2, teamGroup), dev2))
	echoPod(t, longWatchUser)
	longWatchOpened := time.Now()
	longWatch, err := longWatchUser.CoreV1().ConfigMaps(teamNS).Watch(t.Context(), metav1.ListOptions{FieldSelector: "metadata.name=long-watch"})
	must(t, err)
	defer longWatch.Stop()
	mallory := upstreamUser(t, "mallory", teamGroup)
	root := upstreamUser(t, "root", "system:masters")

	for i, c := range clusters {
		other := clusters[1-i].name
		alice := upstreamUser(t, "alice-"+c.name, teamGroup)
		cs := kube(t, proxyConfig(alice, c.name))

		t.Run(c.flow+": a user with clusters/proxy reaches what fleet:<group> may do there, nothing more", func(t *testing.T) {
			pod := echoPod(t, cs)
			_, err := cs.CoreV1().Pods("kube-system").List(t.Context(), metav1.ListOptions{})
			if statusCode(err) != http.StatusForbidden || !strings.Contains(err.Error(), "fleet:alice-"+c.name) {
				t.Errorf("pods in kube-system: %v; want the downstream's 403 naming fleet:alice-%s", err, c.name)
			}
			_, err = kube(t, proxyConfig(alice, other)).CoreV1().Pods(teamNS).List(t.Context(), metav1.ListOptions{})
			if statusCode(err) != http.StatusForbidden {
				t.Errorf("cluster %s through its proxy without the right: %v; want 403", other, err)
			}
			_, err = kube(t, proxyConfig(mallory, c.name)).CoreV1().Pods(teamNS).List(t.Context(), metav1.ListOptions{})
			if statusCode(err) != http.StatusForbidden {
				t.Errorf("a user without clusters/proxy: %v; want 403", err)
			}
			// An upstream cluster-admin passes fleet-proxy but is no one
			// downstream: fleet:root in group fleet:system:masters.
			_, err = kube(t, proxyConfig(root, c.name)).CoreV1().Pods("kube-system").List(t.Context(), metav1.ListOptions{})
			if statusCode(err) != http.StatusForbidden {
				t.Errorf("upstream system:masters downstream: %v; want 403", err)
			}
			t.Logf("alice-%s lists %s/%s through the proxy", c.name, teamNS, pod.Name)
		})

		t.Run(c.flow+": smuggled identity headers gain nothing", func(t *testing.T) {
			// HTTP/1.1: Go's HTTP/2 client refuses to send a Connection
			// header, and the CVE-2021-31999 case is an HTTP/1.1 one.
			h1 := proxyConfig(alice, c.name)
			h1.NextProtos = []string{"http/1.1"}
			hc, err := rest.HTTPClientFor(h1)
			must(t, err)
			base := proxyConfig(alice, c.name).Host
			for _, hdr := range []http.Header{
				{"Impersonate-User": {"system:admin"}},
				{"Impersonate-Group": {"system:masters"}},
				{"Connection": {"Impersonate-User"}, "Impersonate-User": {"system:admin"}},
				{"Connection": {"X-Remote-User"}, "X-Remote-User": {"system:admin"}, "X-Remote-Group": {"system:masters"}},
			} {
				req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/api/v1/namespaces/kube-system/secrets", nil)
				for k, v := range hdr {
					req.Header[k] = v
				}
				resp, err := hc.Do(req)
				must(t, err)
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				// The upstream API server handles Impersonate-* itself
				// (alice may not impersonate: 403; a group without a user:
				// 400); what reaches fleet-proxy is stripped, and
				// fleet:alice-<c> may not read kube-system's secrets: 403.
				if resp.StatusCode != http.StatusForbidden && resp.StatusCode != http.StatusBadRequest {
					t.Errorf("headers %v: %s %s; want 403 or 400", hdr, resp.Status, body)
				}
			}
			// The impersonator without impersonation headers can do nothing.
			down := clientset(t, c.dev)
			sas, err := down.CoreV1().ServiceAccounts("cattle-impersonation-system").List(t.Context(), metav1.ListOptions{})
			must(t, err)
			if len(sas.Items) == 0 {
				t.Fatal("no impersonator ServiceAccount downstream after requests through the proxy")
			}
			for _, sa := range sas.Items {
				tok, err := down.CoreV1().ServiceAccounts(sa.Namespace).CreateToken(t.Context(), sa.Name, &authnTokenRequest, metav1.CreateOptions{})
				must(t, err)
				cfg, err := cluster(c.dev).RESTConfig()
				must(t, err)
				cfg = rest.AnonymousClientConfig(cfg)
				cfg.BearerToken = tok.Status.Token
				_, err = kube(t, cfg).CoreV1().Pods(teamNS).List(t.Context(), metav1.ListOptions{})
				if statusCode(err) != http.StatusForbidden {
					t.Errorf("impersonator %s without headers lists pods: %v; want 403", sa.Name, err)
				}
			}
		})

		t.Run(c.flow+": server-side apply and delete through the proxy, as the user", func(t *testing.T) {
			echoPod(t, cs) // the team's Bundle is applied
			cm := corev1apply.ConfigMap("applied", teamNS).WithData(map[string]string{"by": "alice"})
			got, err := cs.CoreV1().ConfigMaps(teamNS).Apply(t.Context(), cm, metav1.ApplyOptions{FieldManager: "alice-cli", Force: true})
			must(t, err)
			managers := []string{}
			for _, m := range got.ManagedFields {
				managers = append(managers, m.Manager)
			}
			if len(managers) != 1 || managers[0] != "alice-cli" || got.Data["by"] != "alice" {
				t.Errorf("applied ConfigMap: managers %v, data %v; want alice-cli's apply", managers, got.Data)
			}
			// Downstream, the object is there; the audit identity is the user's.
			down := clientset(t, c.dev)
			if _, err := down.CoreV1().ConfigMaps(teamNS).Get(t.Context(), "applied", metav1.GetOptions{}); err != nil {
				t.Errorf("the applied ConfigMap downstream: %v", err)
			}
			must(t, cs.CoreV1().ConfigMaps(teamNS).Delete(t.Context(), "applied", metav1.DeleteOptions{}))
			if _, err := down.CoreV1().ConfigMaps(teamNS).Get(t.Context(), "applied", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("after a delete through the proxy: %v; want NotFound", err)
			}
			// Outside what fleet:team-a may write: the downstream's 403.
			_, err = cs.CoreV1().ConfigMaps("default").Apply(t.Context(), corev1apply.ConfigMap("applied", "default"), metav1.ApplyOptions{FieldManager: "alice-cli"})
			if statusCode(err) != http.StatusForbidden {
				t.Errorf("apply in namespace default: %v; want 403", err)
			}
		})

		t.Run(c.flow+": exec, logs -f, port-forward and watch through the proxy", func(t *testing.T) {
			cfg := proxyConfig(alice, c.name)
			pod := echoPod(t, cs)
			for _, mode := range []string{"SPDY", "WebSocket"} {
				u := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(teamNS).Name(pod.Name).SubResource("exec").
					VersionedParams(&corev1.PodExecOptions{Container: "echo", Command: []string{"/pause", "echo", "hello", mode}, Stdout: true, Stderr: true}, scheme.ParameterCodec).URL()
				var exec remotecommand.Executor
				var err error
				if mode == "SPDY" {
					exec, err = remotecommand.NewSPDYExecutor(cfg, http.MethodPost, u)
				} else {
					exec, err = remotecommand.NewWebSocketExecutor(cfg, http.MethodGet, u.String())
				}
				must(t, err)
				var out, errOut bytes.Buffer
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				err = exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &errOut})
				cancel()
				if err != nil || strings.TrimSpace(out.String()) != "hello "+mode {
					t.Errorf("exec over %s: %v, stdout %q, stderr %q", mode, err, out.String(), errOut.String())
				}
			}

			// logs -f: two tick lines arrive one after the other on one stream.
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			stream, err := cs.CoreV1().Pods(teamNS).GetLogs(pod.Name, &corev1.PodLogOptions{Follow: true, TailLines: ptr.To[int64](1)}).Stream(ctx)
			must(t, err)
			sc := bufio.NewScanner(stream)
			var ticks []string
			for len(ticks) < 3 && sc.Scan() {
				if strings.HasPrefix(sc.Text(), "tick ") {
					ticks = append(ticks, sc.Text())
				}
			}
			stream.Close()
			cancel()
			if len(ticks) < 3 {
				t.Errorf("logs -f: got %q (%v); want three tick lines as they are written", ticks, sc.Err())
			}

			// port-forward, both transports.
			pfURL := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(teamNS).Name(pod.Name).SubResource("portforward").URL()
			for _, mode := range []string{"SPDY", "WebSocket"} {
				var dialer httpstream.Dialer
				if mode == "SPDY" {
					rt, upgrader, err := spdy.RoundTripperFor(cfg)
					must(t, err)
					dialer = spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, pfURL)
				} else {
					d, err := portforward.NewSPDYOverWebsocketDialer(pfURL, cfg)
					must(t, err)
					dialer = d
				}
				body, err := portForwardGet(t, dialer, "8080")
				if err != nil || !strings.HasPrefix(body, "hello from "+pod.Name) {
					t.Errorf("port-forward over %s: %v, body %q", mode, err, body)
				}
			}

			// A watch through the proxy sees a change made downstream.
			w, err := cs.CoreV1().ConfigMaps(teamNS).Watch(t.Context(), metav1.ListOptions{FieldSelector: "metadata.name=watched"})
			must(t, err)
			defer w.Stop()
			_, err = clientset(t, c.dev).CoreV1().ConfigMaps(teamNS).Create(t.Context(),
				&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "watched"}}, metav1.CreateOptions{})
			must(t, err)
			select {
			case ev := <-w.ResultChan():
				if ev.Type != watch.Added {
					t.Errorf("watch through the proxy: %s; want ADDED", ev.Type)
				}
			case <-time.After(30 * time.Second):
				t.Error("watch through the proxy: no event within 30s of the change")
			}
		})
	}

	t.Run("a watch through the proxy stays open over a minute and delivers", func(t *testing.T) {
		// No timeout of the aggregator, fleet-proxy, the tunnel or the
		// agent may cut it; opened before the tests above, it waits out
		// the rest of the minute here.
		if wait := time.Until(longWatchOpened.Add(65 * time.Second)); wait > 0 {
			time.Sleep(wait)
		}
		_, err := clientset(t, "dev-2").CoreV1().ConfigMaps(teamNS).Create(t.Context(),
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "long-watch"}}, metav1.CreateOptions{})
		must(t, err)
		select {
		case ev, ok := <-longWatch.ResultChan():
			if !ok || ev.Type != watch.Added {
				t.Errorf("watch through the proxy open for %s: closed %v, event %s %v; want ADDED", time.Since(longWatchOpened).Round(time.Second), !ok, ev.Type, ev.Object)
			} else {
				t.Logf("a watch through the proxy delivered after %s open", time.Since(longWatchOpened).Round(time.Second))
			}
		case <-time.After(30 * time.Second):
			t.Errorf("watch through the proxy open for %s: no event within 30s of the change", time.Since(longWatchOpened).Round(time.Second))
		}
	})

	t.Run("resilience: proxy replica killed, agent replica killed, agent down and back", func(t *testing.T) {
		testAccessResilience(t, "dev-1")
	})
}

// testAccessResilience kills what carries name's tunnel, one part at a
// time.
func testAccessResilience(t *testing.T, name string) {
	ctx := t.Context()
	alice := kube(t, proxyConfig(upstreamUser(t, "alice-"+name, teamGroup), name))
	reachable := func() error {
		_, err := alice.CoreV1().Pods(teamNS).List(ctx, metav1.ListOptions{})
		return err
	}
	connected := connectedCondition(t, name, metav1.ConditionTrue, 2*time.Minute)
	proxyPod := strings.TrimPrefix(connected.Message, "The agent's tunnel is held by fleet-proxy replica ")

	// 1. The fleet-proxy replica holding the tunnel is killed: the agent
	// attaches to another replica (through the aggregator) within seconds.
	upCS := clientset(t, "upstream")
	must(t, upCS.CoreV1().Pods(agentNS).Delete(ctx, proxyPod, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}))
	killed := time.Now()
	must(t, devenv.Poll(ctx, time.Minute, reachable))
	t.Logf("proxy replica %s killed: reachable again after %s", proxyPod, time.Since(killed).Round(100*time.Millisecond))
	must(t, devenv.Poll(ctx, time.Minute, func() error {
		c := connectedCondition(t, name, metav1.ConditionTrue, time.Minute)
		if strings.HasSuffix(c.Message, proxyPod) {
			return fmt.Errorf("Connected still names the killed replica: %s", c.Message)
		}
		return nil
	}))

	// 2. Two agent replicas, each with its own tunnel: killing one keeps
	// the cluster reachable, and Connected never turns False.
	down := clientset(t, name)
	scaleAgent(t, down, 2)
	pods := tunnelledAgents(t, down, 2)
	before := connectedCondition(t, name, metav1.ConditionTrue, time.Minute)
	must(t, down.CoreV1().Pods(agentNS).Delete(ctx, pods[0], metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}))
	killed = time.Now()
	failures := 0
	for time.Since(killed) < 15*time.Second { // longer than Connected's grace
		if err := reachable(); err != nil {
			failures++
			t.Logf("%s after killing agent pod %s: %v", time.Since(killed).Round(time.Millisecond), pods[0], err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	// A request in flight on the killed pod's session may fail; the
	// cluster must not be unreachable for longer than that.
	if failures > 2 {
		t.Errorf("%d of the requests in the 15s after killing one of two agent pods failed; want the other pod's tunnel to serve them", failures)
	}
	after := connectedCondition(t, name, metav1.ConditionTrue, time.Minute)
	if !after.LastTransitionTime.Equal(&before.LastTransitionTime) {
		t.Errorf("Connected went False and back while one of two agent replicas was killed (was %s, now %s)", before.LastTransitionTime, after.LastTransitionTime)
	}

	// 3. No agent: Connected=False with the reason, 503 through the proxy;
	// the agent back: True, reachable.
	scaleAgent(t, down, 0)
	must(t, devenv.Poll(ctx, 2*time.Minute, func() error {
		pods, err := down.CoreV1().Pods(agentNS).List(ctx, metav1.ListOptions{LabelSelector: agentPods})
		if err != nil || len(pods.Items) > 0 {
			return fmt.Errorf("agent pods still there: %v", err)
		}
		return nil
	}))
	c := connectedCondition(t, name, metav1.ConditionFalse, 2*time.Minute)
	if c.Reason != fleet.TunnelDownReason || !strings.Contains(c.Message, agentNS) {
		t.Errorf("Connected=False: reason %q, message %q; want %s naming namespace %s", c.Reason, c.Message, fleet.TunnelDownReason, agentNS)
	}
	if err := reachable(); statusCode(err) != http.StatusServiceUnavailable {
		t.Errorf("a request while no agent runs: %v; want 503", err)
	}
	scaleAgent(t, down, 1)
	connectedCondition(t, name, metav1.ConditionTrue, 3*time.Minute)
	must(t, devenv.Poll(ctx, time.Minute, reachable))
	runningAgent(t, down, 2*time.Minute)

}

// connectedCondition waits for Cluster name's Connected condition to have
// status want and returns it.
func connectedCondition(t *testing.T, name string, want metav1.ConditionStatus, timeout time.Duration) metav1.Condition {
	t.Helper()
	var got metav1.Condition
	must(t, devenv.Poll(t.Context(), timeout, func() error {
		c := meta.FindStatusCondition(getCluster(t, name).Status.Conditions, fleet.ConnectedCondition)
		if c == nil || c.Status != want {
			return fmt.Errorf("Connected is %v, want %s", c, want)
		}
		got = *c
		return nil
	}))
	return got
}

// scaleAgent sets the agent Deployment's replicas through its scale
// subresource, as an operator would (`kubectl scale`).
func scaleAgent(t *testing.T, cs *kubernetes.Clientset, replicas int32) {
	t.Helper()
	s, err := cs.AppsV1().Deployments(agentNS).GetScale(t.Context(), "fleet-agent", metav1.GetOptions{})
	must(t, err)
	s.Spec.Replicas = replicas
	_, err = cs.AppsV1().Deployments(agentNS).UpdateScale(t.Context(), "fleet-agent", s, metav1.UpdateOptions{})
	must(t, err)
}

// tunnelledAgents waits for n ready agent pods whose logs say their tunnel
// is connected, and returns their names.
func tunnelledAgents(t *testing.T, cs *kubernetes.Clientset, n int) []string {
	t.Helper()
	var names []string
	must(t, devenv.Poll(t.Context(), 3*time.Minute, func() error {
		pods, err := cs.CoreV1().Pods(agentNS).List(t.Context(), metav1.ListOptions{LabelSelector: agentPods})
		if err != nil {
			return err
		}
		names = names[:0]
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.DeletionTimestamp != nil || !podReady(p) {
				continue
			}
			logs, err := cs.CoreV1().Pods(agentNS).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(t.Context())
			if err != nil {
				return err
			}
			if bytes.Contains(logs, []byte("agent tunnel connected")) {
				names = append(names, p.Name)
			}
		}
		if len(names) < n {
			return fmt.Errorf("%d ready agent pods with a connected tunnel, want %d", len(names), n)
		}
		return nil
	}))
	return names
}

// authnTokenRequest asks for a short-lived token.
var authnTokenRequest = authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}

// portForwardGet forwards a local port to the pod's port and GETs / on it.
func portForwardGet(t *testing.T, dialer httpstream.Dialer, port string) (string, error) {
	stop, ready := make(chan struct{}), make(chan struct{})
	defer close(stop)
	pf, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{"0:" + port}, stop, ready, io.Discard, io.Discard)
	if err != nil {
		return "", err
	}
	errs := make(chan error, 1)
	go func() { errs <- pf.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-errs:
		return "", fmt.Errorf("port-forward ended: %v", err)
	case <-time.After(time.Minute):
		return "", fmt.Errorf("port-forward not ready within a minute")
	}
	ports, err := pf.GetPorts()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, (&url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[0].Local), Path: "/"}).String(), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}
