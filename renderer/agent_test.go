package renderer_test

import (
	"bytes"
	"encoding/base64"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/registration"
	"github.com/gitops-fleet/fleet/internal/strictyaml"
	"github.com/gitops-fleet/fleet/renderer"
	"github.com/gitops-fleet/fleet/renderer/agentvalues"
	"github.com/gitops-fleet/fleet/renderer/renderertest"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

func loadConfig(t testing.TB) *config.Config {
	t.Helper()
	return renderertest.LoadConfig(t, "testdata/config.yaml")
}

func newRenderer(t testing.TB) *renderer.AgentRenderer {
	t.Helper()
	r, err := renderer.NewAgentRenderer()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// renderFile renders a test Cluster the way `fleet render agent` does.
func renderFile(t *testing.T, r *renderer.AgentRenderer, path string) (*agentvalues.Values, *renderer.Output) {
	t.Helper()
	c := renderertest.LoadCluster(t, path)
	v, err := agentvalues.Offline(c, loadConfig(t), c.Spec.KubeConfigSecret != "")
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	out, err := r.Render(v)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v, out
}

func objects(t *testing.T, out *renderer.Output) []*unstructured.Unstructured {
	t.Helper()
	objs, err := out.Objects()
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

func deployment(t *testing.T, out *renderer.Output) *appsv1.Deployment {
	t.Helper()
	o := find(t, objects(t, out), "Deployment", "fleet-agent")
	if o == nil {
		t.Fatal("no Deployment fleet-agent rendered")
	}
	d := &appsv1.Deployment{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, d); err != nil {
		t.Fatal(err)
	}
	return d
}

func envOf(d *appsv1.Deployment) map[string]corev1.EnvVar {
	m := map[string]corev1.EnvVar{}
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		m[e.Name] = e
	}
	return m
}

func TestAgentRender_Golden(t *testing.T) {
	r := newRenderer(t)
	files, _ := filepath.Glob("testdata/clusters/*.yaml")
	if len(files) < 8 {
		t.Fatalf("want at least 8 test clusters, have %d", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			_, out := renderFile(t, r, f)
			golden := filepath.Join("testdata", "golden", filepath.Base(f))
			if *update {
				if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, out.YAML, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run `make golden` to create it)", err)
			}
			if diff := cmp.Diff(string(want), string(out.YAML)); diff != "" {
				t.Errorf("rendered agent differs from %s (-want +got); if intended, run `make golden`:\n%s", golden, diff)
			}
		})
	}
}

func TestAgentRender_Customisations(t *testing.T) {
	r := newRenderer(t)
	cases := map[string]func(t *testing.T, v *agentvalues.Values, out *renderer.Output){
		"01-minimal-manager.yaml": func(t *testing.T, v *agentvalues.Values, out *renderer.Output) {
			d := deployment(t, out)
			if d.Namespace != "cattle-fleet-system" {
				t.Errorf("namespace %q", d.Namespace)
			}
			spec := d.Spec.Template.Spec
			c := spec.Containers[0]
			if c.Image != "registry.example.com/gitops-fleet/fleet:1.2.3" || c.ImagePullPolicy != corev1.PullAlways {
				t.Errorf("image %q policy %q", c.Image, c.ImagePullPolicy)
			}
			if *d.Spec.Replicas != 2 {
				t.Errorf("replicas %d, want 2 from the controller config", *d.Spec.Replicas)
			}
			if d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType {
				t.Errorf("strategy %q", d.Spec.Strategy.Type)
			}
			sc := c.SecurityContext
			if sc == nil || *sc.AllowPrivilegeEscalation || !*sc.ReadOnlyRootFilesystem || *sc.Privileged || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
				t.Errorf("insecure container security context %+v", sc)
			}
			if psc := spec.SecurityContext; psc == nil || !*psc.RunAsNonRoot {
				t.Error("pod may run as root")
			}
			if c.LivenessProbe == nil || c.ReadinessProbe == nil {
				t.Error("probes missing")
			}
			env := envOf(d)
			for name, want := range map[string]string{
				"GENERATION": "0", "CHECKIN_INTERVAL": "30s", "CATTLE_ELECTION_LEASE_DURATION": "40s",
				"CATTLE_ELECTION_RENEW_DEADLINE": "30s", "CATTLE_ELECTION_RETRY_PERIOD": "5s",
				"HTTPS_PROXY": "http://proxy.example.com:3128", "NO_PROXY": "10.0.0.0/8,.svc",
			} {
				if env[name].Value != want {
					t.Errorf("env %s = %q, want %q", name, env[name].Value, want)
				}
			}
			if _, ok := env["HTTP_PROXY"]; ok {
				t.Error("HTTP_PROXY set though not configured")
			}
			if len(spec.ImagePullSecrets) != 1 || spec.ImagePullSecrets[0].Name != "global-pull-secret" {
				t.Errorf("pull secrets %v, want the controller's", spec.ImagePullSecrets)
			}
			if v.ClientID != agentvalues.ClientIDPlaceholder {
				t.Errorf("clientID %q, want the placeholder", v.ClientID)
			}
			if find(t, objects(t, out), "ServiceAccount", "fleet-agent") == nil {
				t.Error("no ServiceAccount fleet-agent")
			}
			// The namespace's default ServiceAccount exists before helm
			// install runs: the chart must not create it (the agent hardens it).
			if find(t, objects(t, out), "ServiceAccount", "default") != nil {
				t.Error("the chart creates ServiceAccount default: helm install would fail on it")
			}
			if find(t, objects(t, out), "NetworkPolicy", "default-allow-all") == nil || find(t, objects(t, out), "ClusterRole", "cattle-fleet-system-fleet-agent-role") == nil {
				t.Fatal("missing NetworkPolicy or ClusterRole")
			}
			// The NetworkPolicy is the agent pod's only: it selects what the
			// Deployment selects, lets in nothing but the probes, and lets
			// everything out.
			np := &networkingv1.NetworkPolicy{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(find(t, objects(t, out), "NetworkPolicy", "default-allow-all").Object, np); err != nil {
				t.Fatal(err)
			}
			if sel := np.Spec.PodSelector.MatchLabels; len(sel) == 0 || !reflect.DeepEqual(sel, d.Spec.Selector.MatchLabels) || len(np.Spec.PodSelector.MatchExpressions) > 0 {
				t.Errorf("NetworkPolicy selects %+v, want exactly the agent Deployment's pods %v", np.Spec.PodSelector, d.Spec.Selector.MatchLabels)
			}
			probe := d.Spec.Template.Spec.Containers[0].Ports[0].ContainerPort
			if in := np.Spec.Ingress; len(in) != 1 || len(in[0].From) != 0 || len(in[0].Ports) != 1 ||
				in[0].Ports[0].Port == nil || in[0].Ports[0].Port.IntValue() != int(probe) || *in[0].Ports[0].Protocol != corev1.ProtocolTCP {
				t.Errorf("NetworkPolicy ingress %+v, want only TCP %d (the probes)", in, probe)
			}
			if eg := np.Spec.Egress; len(eg) != 1 || len(eg[0].To) != 0 || len(eg[0].Ports) != 0 {
				t.Errorf("NetworkPolicy egress %+v, want everything", eg)
			}
			cm := find(t, objects(t, out), "ConfigMap", "fleet-agent")
			cfg, _, _ := unstructured.NestedString(cm.Object, "data", "config")
			if !strings.Contains(cfg, `"agentTLSMode":"strict"`) || !strings.Contains(cfg, `"checkinInterval":"30s"`) {
				t.Errorf("agent config %s", cfg)
			}
			s := find(t, objects(t, out), "Secret", "fleet-agent-bootstrap")
			if s == nil {
				t.Fatal("no bootstrap Secret for a manager-initiated cluster")
			}
			for key, want := range map[string]string{
				"apiServerURL": "https://upstream.example.com:6443", "tokenName": "import-token-minimal",
				"clusterNamespace": "fleet-default", "systemRegistrationNamespace": "cattle-fleet-clusters-system",
				"token": agentvalues.TokenPlaceholder,
			} {
				got, _, _ := unstructured.NestedString(s.Object, "data", key)
				if dec, _ := base64.StdEncoding.DecodeString(got); string(dec) != want {
					t.Errorf("bootstrap %s = %q, want %q", key, dec, want)
				}
			}
		},
		"02-env-vars.yaml": func(t *testing.T, v *agentvalues.Values, out *renderer.Output) {
			d := deployment(t, out)
			env := d.Spec.Template.Spec.Containers[0].Env
			n := len(env)
			if env[n-3].Name != "LOG_LEVEL" || env[n-2].ValueFrom.FieldRef.FieldPath != "spec.nodeName" || env[n-1].Name != "weird.name-ok" {
				t.Errorf("user env vars must come last, in order: %v", env[n-3:])
			}
		},
		"03-tolerations.yaml": func(t *testing.T, v *agentvalues.Values, out *renderer.Output) {
			tol := deployment(t, out).Spec.Template.Spec.Tolerations
			var keys []string
			for _, x := range tol {
				keys = append(keys, x.Key)
			}
			want := []string{"cattle.io/os", "node.cloudprovider.kubernetes.io/uninitialized", "alpha", "zeta"}
			if diff := cmp.Diff(want, keys); diff != "" {
				t.Errorf("tolerations: defaults first, then the Cluster's sorted (-want +got):\n%s", diff)
			}
			if *tol[3].TolerationSeconds != 30 {
				t.Error("tolerationSeconds lost")
			}
		},
		"04-affinity.yaml": func(t *testing.T, v *agentvalues.Values, out *renderer.Output) {
			a := deployment(t, out).Spec.Template.Spec.Affinity
			if a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil || a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution != nil {
				t.Errorf("affinity must replace the default: %+v", a.NodeAffinity)
			}
		},
		"05-resources.yaml": func(t *testing.T, v *agentvalues.Values, out *renderer.Output) {
			for _, c := range deployment(t, out).Spec.Template.Spec.Containers {
				if c.Resources.Requests.Cpu().String() != "100m" || c.Resources.Limits.Memory().String() != "512Mi" {
					t.Errorf("container %s resources %v", c.Name, c.Resources)
				}
			}
		},
		"06-host-network.yaml": func(t *testing.T, v *agentvalues.Values, out *renderer.Output) {
			d := deployment(t, out)
			if !d.Spec.Template.Spec.HostNetwork || d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType || d.Spec.Template.Spec.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
				t.Errorf("hostNetwork %v strategy %q dns %q", d.Spec.Template.Spec.HostNetwork, d.Spec.Strategy.Type, d.Spec.Template.Spec.DNSPolicy)
			}
		},
		"07-private-repo.yaml": func(t *testing.T, v *agentvalues.Values, out *renderer.Output) {
			spec := deployment(t, out).Spec.Template.Spec
			if img := spec.Containers[0].Image; img != "mirror.internal.example.com:5000/gitops-fleet/fleet:1.2.3" {
				t.Errorf("image %q: privateRepoURL must replace the system registry", img)
			}
			if len(spec.ImagePullSecrets) != 1 || spec.ImagePullSecrets[0].Name != "mirror-credentials" {
				t.Errorf("pull secrets %v: the Cluster's must replace the controller's", spec.ImagePullSecrets)
			}
		},
		"08-scheduling.yaml": func(t *testing.T, v *agentvalues.Values, out *renderer.Output) {
			pc := find(t, objects(t, out), "PriorityClass", "fleet-agent-priority-class")
			pdb := find(t, objects(t, out), "PodDisruptionBudget", "fleet-agent-pod-disruption-budget")
			if pc == nil || pdb == nil {
				t.Fatal("PriorityClass or PDB missing")
			}
			if val, _, _ := unstructured.NestedInt64(pc.Object, "value"); val != 1000 {
				t.Errorf("priority %d", val)
			}
			if p, _, _ := unstructured.NestedString(pc.Object, "preemptionPolicy"); p != "Never" {
				t.Errorf("preemptionPolicy %q", p)
			}
			if mu, _, _ := unstructured.NestedString(pdb.Object, "spec", "maxUnavailable"); mu != "50%" {
				t.Errorf("maxUnavailable %q", mu)
			}
			if deployment(t, out).Spec.Template.Spec.PriorityClassName != "fleet-agent-priority-class" {
				t.Error("pod does not use the priority class")
			}
		},
		"09-agent-namespace.yaml": func(t *testing.T, v *agentvalues.Values, out *renderer.Output) {
			for _, o := range objects(t, out) {
				if ns := o.GetNamespace(); ns != "" && ns != "team-a-fleet-agent" {
					t.Errorf("%s %s in namespace %q", o.GetKind(), o.GetName(), ns)
				}
			}
			if find(t, objects(t, out), "ClusterRole", "team-a-fleet-agent-fleet-agent-role") == nil {
				t.Error("ClusterRole not named after the agent namespace")
			}
			if v.ClusterNamespace != "team-a" {
				t.Errorf("clusterNamespace %q", v.ClusterNamespace)
			}
		},
		"10-agent-initiated.yaml": func(t *testing.T, v *agentvalues.Values, out *renderer.Output) {
			if find(t, objects(t, out), "Secret", "fleet-agent-bootstrap") != nil {
				t.Error("the agent's own Bundle must not carry a bootstrap Secret")
			}
			if envOf(deployment(t, out))["GENERATION"].Value != "4" {
				t.Error("generation not in the pod template")
			}
		},
		"11-large-generation.yaml": func(t *testing.T, v *agentvalues.Values, out *renderer.Output) {
			if g := envOf(deployment(t, out))["GENERATION"].Value; g != "1234567890123" {
				t.Errorf("GENERATION %q, want the exact integer", g)
			}
		},
	}
	for name, check := range cases {
		t.Run(name, func(t *testing.T) {
			v, out := renderFile(t, r, filepath.Join("testdata", "clusters", name))
			check(t, v, out)
		})
	}
}

func TestAgentRender_AdoptionChangesOnlyTheBootstrapSecret(t *testing.T) {
	r := newRenderer(t)
	c := renderertest.LoadCluster(t, "testdata/clusters/05-resources.yaml")
	cfg := loadConfig(t)
	first, err := agentvalues.ForCluster(c, cfg, agentvalues.OfflineBootstrap(c))
	if err != nil {
		t.Fatal(err)
	}
	managed, err := agentvalues.ForCluster(c, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, err := r.Render(first)
	if err != nil {
		t.Fatal(err)
	}
	b, err := r.Render(managed)
	if err != nil {
		t.Fatal(err)
	}
	var withoutSecret []*unstructured.Unstructured
	for _, o := range objects(t, a) {
		if o.GetName() != registration.BootstrapSecretName {
			withoutSecret = append(withoutSecret, o)
		}
	}
	if len(withoutSecret) != len(objects(t, a))-1 {
		t.Fatal("first deploy has no bootstrap Secret")
	}
	if diff := cmp.Diff(withoutSecret, objects(t, b)); diff != "" {
		t.Errorf("the agent's own Bundle must equal the first deploy minus the bootstrap Secret (-first +bundle):\n%s", diff)
	}
}

func TestAgentRender_TokenOnlyInTheAppliedCopy(t *testing.T) {
	r := newRenderer(t)
	c := renderertest.LoadCluster(t, "testdata/clusters/02-env-vars.yaml")
	const secretToken = "eyJhbGciOiJSUzI1NiJ9.secret-token-value"
	v, err := agentvalues.ForCluster(c, loadConfig(t), agentvalues.OfflineBootstrap(c))
	if err != nil {
		t.Fatal(err)
	}
	out, err := r.Render(v)
	if err != nil {
		t.Fatal(err)
	}
	applied, err := renderer.InjectBootstrapToken(objects(t, out), secretToken)
	if err != nil {
		t.Fatal(err)
	}
	enc := base64.StdEncoding.EncodeToString([]byte(secretToken))
	if bytes.Contains(out.YAML, []byte(enc)) || bytes.Contains(out.YAML, []byte(secretToken)) {
		t.Error("the stored render contains the token")
	}
	s := find(t, applied, "Secret", registration.BootstrapSecretName)
	if got, _, _ := unstructured.NestedString(s.Object, "data", "token"); got != enc {
		t.Errorf("applied token %q", got)
	}
	orig := find(t, objects(t, out), "Secret", registration.BootstrapSecretName)
	if got, _, _ := unstructured.NestedString(orig.Object, "data", "token"); got == enc {
		t.Error("InjectBootstrapToken changed the stored render")
	}
	withToken := *v
	withToken.Token = secretToken
	h1, _ := v.Hash()
	h2, _ := withToken.Hash()
	if h1 != h2 {
		t.Error("the values hash depends on the token: a token change would redeploy")
	}
	if _, err := renderer.InjectBootstrapToken(applied, "again"); err == nil {
		t.Error("injecting twice must fail: the placeholder is gone")
	}
}

func TestAgentRender_DeterministicAndSafeConcurrently(t *testing.T) {
	r := newRenderer(t)
	c := renderertest.LoadCluster(t, "testdata/clusters/08-scheduling.yaml")
	v, err := agentvalues.Offline(c, loadConfig(t), true)
	if err != nil {
		t.Fatal(err)
	}
	first, err := r.Render(v)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := r.Render(v)
			if err != nil {
				t.Error(err)
				return
			}
			if !bytes.Equal(out.YAML, first.YAML) {
				t.Error("render is not deterministic")
			}
		}()
	}
	wg.Wait()
}

func TestAgentChart_RejectsBadValuesWithClearMessages(t *testing.T) {
	ch, err := renderer.LoadChartDir("../charts/fleet-agent")
	if err != nil {
		t.Fatal(err)
	}
	good := "apiServerURL: https://x.example.com\ntokenName: t\n"
	cases := []struct {
		name, release, namespace, values, want string
	}{
		{"unknown value", "fleet-agent", "cattle-fleet-system", good + "agentTLSmode: strict\n", "additional properties 'agentTLSmode' not allowed"},
		{"bad TLS mode", "fleet-agent", "cattle-fleet-system", good + "agentTLSMode: lax\n", "agentTLSMode"},
		{"bad env name", "fleet-agent", "cattle-fleet-system", good + "env: [{name: 'A=B', value: x}]\n", "env"},
		{"wrong release", "agent", "cattle-fleet-system", good, `must be installed as release "fleet-agent", not "agent"`},
		{"wrong namespace", "fleet-agent", "default", good, `must be installed in namespace "cattle-fleet-system", not "default"`},
		{"no url", "fleet-agent", "cattle-fleet-system", "tokenName: t\n", "apiServerURL is required"},
		{"no token name", "fleet-agent", "cattle-fleet-system", "apiServerURL: https://x.example.com\n", "tokenName is required"},
		{"bad duration", "fleet-agent", "cattle-fleet-system", good + "checkinInterval: 5 minutes\n", "checkinInterval"},
		{"plain http upstream", "fleet-agent", "cattle-fleet-system", "apiServerURL: http://x.example.com\ntokenName: t\n", "is plain http"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := renderer.Render(renderer.Input{Chart: ch, ReleaseName: tc.release, Namespace: tc.namespace, Values: []byte(tc.values)})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
	if _, err := renderer.Render(renderer.Input{Chart: ch, ReleaseName: "fleet-agent", Namespace: "cattle-fleet-system", Values: []byte(good)}); err != nil {
		t.Fatalf("the token's values alone must render: %v", err)
	}
}

// TestAgentValues_PlainHTTPUpstreamNeedsTheOptIn: agents are told an http://
// upstream only when the controller configuration allows it, and then the
// values say so, so the chart (which refuses http otherwise) renders.
func TestAgentValues_PlainHTTPUpstreamNeedsTheOptIn(t *testing.T) {
	c := renderertest.LoadCluster(t, "../examples/gitops/clusters/more/prod-eu.yaml")
	cfg := loadConfig(t)
	cfg.APIServerURL = "http://upstream.example.com"
	_, err := agentvalues.ForCluster(c, cfg, agentvalues.OfflineBootstrap(c))
	if err == nil || !strings.Contains(err.Error(), "allowInsecureAPIServerURL") {
		t.Fatalf("an http upstream without the opt-in: %v", err)
	}
	cfg.AllowInsecureAPIServerURL = true
	v, err := agentvalues.ForCluster(c, cfg, agentvalues.OfflineBootstrap(c))
	if err != nil || !v.InsecureAPIServerURL {
		t.Fatalf("with the opt-in: %v (insecureAPIServerURL %v)", err, v != nil && v.InsecureAPIServerURL)
	}
	if _, err := newRenderer(t).Render(v); err != nil {
		t.Errorf("the chart refuses what the controller allowed: %v", err)
	}
}

func BenchmarkRenderAgent(b *testing.B) {
	r := newRenderer(b)
	c := renderertest.LoadCluster(b, "testdata/clusters/08-scheduling.yaml")
	cfg := loadConfig(b)
	b.ReportAllocs()
	for b.Loop() {
		v, err := agentvalues.ForCluster(c, cfg, agentvalues.OfflineBootstrap(c))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := r.Render(v); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRenderAgentObjects adds decoding the render into objects, as the
// controller does before it applies.
func BenchmarkRenderAgentObjects(b *testing.B) {
	r := newRenderer(b)
	c := renderertest.LoadCluster(b, "testdata/clusters/08-scheduling.yaml")
	cfg := loadConfig(b)
	b.ReportAllocs()
	for b.Loop() {
		v, err := agentvalues.ForCluster(c, cfg, agentvalues.OfflineBootstrap(c))
		if err != nil {
			b.Fatal(err)
		}
		out, err := r.Render(v)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := out.Objects(); err != nil {
			b.Fatal(err)
		}
	}
}

// The agent chart writes the downstream side of the handshake contract
// (internal/registration): the bootstrap Secret the agent registers with and
// the ConfigMap of its settings, under the names and keys the agent reads,
// from a token's values file as an admin installs it.
func TestAgentChart_WritesTheHandshakeContract(t *testing.T) {
	tok := &fleet.ClusterRegistrationToken{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet-default", Name: "edge"}, Spec: fleet.ClusterRegistrationTokenSpec{ClientID: "edge-1"}}
	cfg := loadConfig(t)
	v, err := agentvalues.ForToken(tok, cfg, "eyJhbGciOi.bearer.token")
	if err != nil {
		t.Fatal(err)
	}
	out, err := newRenderer(t).Render(v)
	if err != nil {
		t.Fatal(err)
	}
	s := find(t, objects(t, out), "Secret", registration.BootstrapSecretName)
	if s == nil {
		t.Fatalf("no Secret %s rendered", registration.BootstrapSecretName)
	}
	sec := &corev1.Secret{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(s.Object, sec); err != nil {
		t.Fatal(err)
	}
	b, err := registration.ParseBootstrap(sec.Data)
	if err != nil {
		t.Fatalf("the agent cannot read the bootstrap Secret the chart writes: %v", err)
	}
	want := &registration.Bootstrap{APIServerURL: cfg.APIServerURL, APIServerCA: cfg.APIServerCA, ClusterNamespace: "fleet-default",
		SystemRegistrationNamespace: config.DefaultSystemRegistrationNS, Token: "eyJhbGciOi.bearer.token", TokenName: "edge"}
	if diff := cmp.Diff(want, b); diff != "" {
		t.Errorf("bootstrap (-want +got):\n%s", diff)
	}
	for k := range sec.Data {
		switch k {
		case registration.BootstrapKeyAPIServerURL, registration.BootstrapKeyAPIServerCA, registration.BootstrapKeyClusterNamespace,
			registration.BootstrapKeySystemRegistrationNamespace, registration.BootstrapKeyToken, registration.BootstrapKeyTokenName:
		default:
			t.Errorf("bootstrap Secret key %q is not in the contract", k)
		}
	}

	cm := find(t, objects(t, out), "ConfigMap", registration.AgentConfigMapName)
	if cm == nil {
		t.Fatalf("no ConfigMap %s rendered", registration.AgentConfigMapName)
	}
	doc, _, _ := unstructured.NestedString(cm.Object, "data", registration.AgentConfigKey)
	got := &registration.AgentConfig{}
	if err := strictyaml.Unmarshal([]byte(doc), got); err != nil {
		t.Fatalf("ConfigMap key %s %q does not decode strictly into registration.AgentConfig: %v", registration.AgentConfigKey, doc, err)
	}
	wantCfg := &registration.AgentConfig{Labels: map[string]string{}, ClientID: "edge-1", AgentTLSMode: cfg.GetAgentTLSMode(), CheckinInterval: agentvalues.ShortDuration(cfg.GetAgentCheckinInterval())}
	if diff := cmp.Diff(wantCfg, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("agent config (-want +got):\n%s", diff)
	}
}
