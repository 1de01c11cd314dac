package main

import (
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"helm.sh/helm/v4/pkg/cli/values"
	"helm.sh/helm/v4/pkg/getter"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/gitops-fleet/fleet/charts/valuesschema"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/renderer"
	"github.com/gitops-fleet/fleet/renderer/renderertest"
)

// helmTemplateFleet runs `helm template fleet charts/fleet` with args with
// the Helm 4 CLI and returns its output, or its error with what helm
// printed. The Helm 3 CLI runs too and must agree: the same objects, or the
// same error.
func helmTemplateFleet(t *testing.T, args ...string) ([]byte, string, error) {
	t.Helper()
	type result struct {
		out    []byte
		stderr string
		err    error
	}
	var res []result
	for _, h := range renderertest.HelmCLIs(t) {
		cmd := h.Command(t, append([]string{"template", "fleet", "../../charts/fleet", "-n", "cattle-fleet-system"}, args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		res = append(res, result{out, stderr.String(), err})
	}
	h4, h3 := res[0], res[1]
	switch {
	case (h4.err == nil) != (h3.err == nil):
		t.Errorf("helm template %v: Helm 4 says %v, Helm 3 %v:\n%s\n%s", args, h4.err, h3.err, h4.stderr, h3.stderr)
	case h4.err != nil && h4.stderr != h3.stderr:
		t.Errorf("helm template %v: Helm 4 and Helm 3 refuse with different messages:\n%s\n%s", args, h4.stderr, h3.stderr)
	case h4.err == nil:
		o4, err4 := renderer.DecodeObjects(h4.out)
		o3, err3 := renderer.DecodeObjects(h3.out)
		if err4 != nil || err3 != nil || !reflect.DeepEqual(o4, o3) {
			t.Errorf("helm template %v: Helm 4 and Helm 3 render different objects (%v, %v)", args, err4, err3)
		}
	}
	return h4.out, h4.stderr, h4.err
}

// fleetChart is charts/fleet, parsed once for renderFleetChart.
var fleetChart = sync.OnceValues(func() (*renderer.Chart, error) { return renderer.LoadChartDir("../../charts/fleet") })

// renderFleetChart is `helm template fleet charts/fleet -n
// cattle-fleet-system` with args (-f, --set, --set-json, --set-file) in
// this process, through the renderer (Helm 4's SDK: the same values
// merging, schema check and templates as the Helm 4 CLI, whose bytes the
// render parity tests compare). A helm process costs about 0.15 CPU-seconds
// to start, so the table tests render every case here and run both CLIs
// (helmTemplateFleet) on a sample of them.
func renderFleetChart(t *testing.T, args ...string) ([]byte, string, error) {
	t.Helper()
	var opts values.Options
	for i := 0; i < len(args); i += 2 {
		if i+1 == len(args) {
			t.Fatalf("%v: flag %s without a value", args, args[i])
		}
		v := args[i+1]
		switch args[i] {
		case "-f", "--values":
			opts.ValueFiles = append(opts.ValueFiles, v)
		case "--set":
			opts.Values = append(opts.Values, v)
		case "--set-json":
			opts.JSONValues = append(opts.JSONValues, v)
		case "--set-file":
			opts.FileValues = append(opts.FileValues, v)
		default:
			t.Fatalf("renderFleetChart: flag %s is not supported", args[i])
		}
	}
	vals, err := opts.MergeValues(getter.Providers{})
	if err != nil {
		return nil, err.Error(), err
	}
	doc, err := yaml.Marshal(vals)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := fleetChart()
	if err != nil {
		t.Fatal(err)
	}
	out, err := renderer.Render(renderer.Input{Chart: ch, ReleaseName: "fleet", Namespace: "cattle-fleet-system", Values: doc})
	if err != nil {
		return nil, err.Error(), err
	}
	return out.YAML, "", nil
}

// chartConfig is the configuration the rendered chart gives the controller,
// parsed as the controller parses it.
func chartConfig(t *testing.T, manifests []byte) *config.Config {
	t.Helper()
	objs, err := renderer.DecodeObjects(manifests)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.GetKind() == "ConfigMap" && o.GetName() == config.ConfigMapName {
			data, _, _ := unstructured.NestedString(o.Object, "data", config.ConfigMapKey)
			cfg, err := config.Parse([]byte(data))
			if err != nil {
				t.Fatalf("the controller refuses the configuration the chart rendered: %v\n%s", err, data)
			}
			return cfg
		}
	}
	t.Fatal("charts/fleet rendered no fleet-controller ConfigMap")
	return nil
}

// setJSON turns a configuration document into the --set-json flags of the
// chart values it is written from.
func setJSON(t *testing.T, document string) []string {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal([]byte(document), &m); err != nil {
		t.Fatalf("%s: %v", document, err)
	}
	var args []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		v := m[k]
		path := valuesschema.ValuePath(k)
		if path == "" {
			t.Fatalf("%s: configuration field %s has no chart value", document, k)
		}
		j, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		args = append(args, "--set-json", path+"="+string(j))
	}
	return args
}

// namesKey reports whether helm's error names the chart value: as a JSON
// pointer in a schema error (at '/agent/tlsMode'), or dotted in a
// templates/validate.yaml message.
func namesKey(msg, path string) bool {
	return strings.Contains(msg, "'/"+strings.ReplaceAll(path, ".", "/")) || strings.Contains(msg, path+" ")
}

// TestFleetChart_RefusesWhatTheControllerRefuses is the schema's promise,
// table-driven from internal/config's Rules: each value a rule refuses in
// `fleet render agent --config` (so in the controller) is refused by `helm
// template charts/fleet` given as the chart value it is written from, with
// a message naming that value; each edge case a rule accepts renders, and
// the controller accepts the configuration rendered. Every value is
// rendered with Helm 4's SDK in this process (renderFleetChart); each rule's
// first bad and first good value with the Helm 4 and Helm 3 CLIs too, which
// must agree. A new rule whose bad
// value the chart lets through (no schema entry, no validate.yaml check)
// fails here.
func TestFleetChart_RefusesWhatTheControllerRefuses(t *testing.T) {
	dir := t.TempDir()
	cluster := filepath.Join(dir, "cluster.yaml")
	if err := os.WriteFile(cluster, []byte("apiVersion: fleet.cattle.io/v1alpha1\nkind: Cluster\nmetadata: {name: x, namespace: fleet-default}\nspec: {kubeConfigSecret: x}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range config.Rules {
		path := valuesschema.ValuePath(r.Field)
		for i, bad := range r.Bad {
			n++
			render := renderFleetChart
			if i == 0 {
				render = helmTemplateFleet // both CLIs, for each rule
			}
			t.Run("refuses "+bad, func(t *testing.T) {
				// The CLI refuses it for this rule (with an upstream URL, so
				// that is not what it complains about).
				var m map[string]any
				if err := yaml.Unmarshal([]byte(bad), &m); err != nil {
					t.Fatal(err)
				}
				if _, ok := m["apiServerURL"]; !ok {
					m["apiServerURL"] = "https://fleet.example.com:6443"
				}
				doc, _ := yaml.Marshal(m)
				cfgFile := filepath.Join(t.TempDir(), "config.yaml")
				if err := os.WriteFile(cfgFile, doc, 0o600); err != nil {
					t.Fatal(err)
				}
				_, err := runCLI(t, "render", "agent", "--cluster", cluster, "--config", cfgFile)
				if err == nil || !strings.Contains(err.Error(), r.Field) {
					t.Errorf("fleet render agent --config with %s: %v, want the rule of %s to refuse it", bad, err, r.Field)
				}
				args := setJSON(t, bad)
				_, stderr, err := render(t, args...)
				if err == nil {
					t.Fatalf("helm template %s: accepted; the chart must refuse what the controller refuses (rule of %s: add it to the schema, or to templates/validate.yaml when JSON schema cannot say it)", strings.Join(args, " "), r.Field)
				}
				if !namesKey(stderr, path) {
					t.Errorf("helm template %s: the error does not name %s:\n%s", strings.Join(args, " "), path, stderr)
				}
			})
		}
		for i, good := range r.Good {
			render := renderFleetChart
			if i == 0 {
				render = helmTemplateFleet
			}
			t.Run("accepts "+good, func(t *testing.T) {
				args := setJSON(t, good)
				out, stderr, err := render(t, args...)
				if err != nil {
					t.Fatalf("helm template %s: %v\n%s", strings.Join(args, " "), err, stderr)
				}
				chartConfig(t, out)
			})
		}
	}
	if n < len(config.Rules) {
		t.Fatalf("%d bad values for %d rules", n, len(config.Rules))
	}
}

// TestFleetChart_RefusesMistakes: the mistakes of the newcomer review, and
// the chart's own values, fail `helm template` naming the value.
func TestFleetChart_RefusesMistakes(t *testing.T) {
	for i, tc := range []struct {
		args []string
		want string
	}{
		// Rendered replicas: 0 before the schema: the controller never ran.
		{[]string{"--set", "replicas=two"}, "at '/replicas': got string, want integer"},
		{[]string{"--set", "replicas=-1"}, "at '/replicas'"},
		{[]string{"--set", "agntRollout.canary.count=1"}, "additional properties 'agntRollout' not allowed"},
		{[]string{"--set", "agent.tlsmode=strict"}, "additional properties 'tlsmode' not allowed"},
		{[]string{"--set", "bundleRendering.timout=1m"}, "additional properties 'timout' not allowed"},
		{[]string{"--set", "agent.checkinInterval=1d"}, "at '/agent/checkinInterval'"},
		{[]string{"--set", "shards=0"}, "at '/shards'"},
		{[]string{"--set", "renderer.port=70000"}, "at '/renderer/port'"},
		{[]string{"--set", "proxy.directTokenMaxLifetime=1d"}, "at '/proxy/directTokenMaxLifetime'"},
		{[]string{"--set", "logLevel=verbose"}, "at '/logLevel'"},
		{[]string{"--set", "metrics.serviceMonitor.interval=soon"}, "at '/metrics/serviceMonitor/interval'"},
		{[]string{"--set", "image.imagePullPolicy=Sometimes"}, "at '/image/imagePullPolicy'"},
		{[]string{"--set", "imagePullSecrets[0]=regcred"}, "at '/imagePullSecrets/0'"},
		{[]string{"--set", "resources.limit.memory=1Gi"}, "additional properties 'limit' not allowed"},
		{[]string{"--set", "probePort=8080"}, "metrics.port and probePort are both 8080"},
		{[]string{"--set", "proxy.metricsPort=8443"}, "proxy.port and proxy.metricsPort are both 8443"},
		{[]string{"--set", "proxy.endpoint.enabled=true"}, "proxy.endpoint.enabled needs proxy.endpoint.url"},
		{[]string{"--set", "proxy.endpoint.enabled=true", "--set", "proxy.endpoint.url=http://fleet-proxy.example.com"}, "at '/proxy/endpoint/url'"},
		{[]string{"--set", "proxy.endpoint.enabled=true", "--set", "proxy.endpoint.url=https://fleet-proxy.example.com", "--set", "proxy.endpoint.port=8443"},
			"proxy.endpoint.port 8443 is also proxy.port or proxy.metricsPort"},
	} {
		render := renderFleetChart
		if i%3 == 0 {
			render = helmTemplateFleet // both CLIs on a sample: schema and validate.yaml messages
		}
		_, stderr, err := render(t, tc.args...)
		if err == nil || !strings.Contains(stderr, tc.want) {
			t.Errorf("helm template %v: %v, want an error containing %q:\n%s", tc.args, err, tc.want, stderr)
		}
	}
}

// TestFleetChart_DefaultsAndDocumentedValuesRender: the schema refuses
// nothing users are told to write: the defaults, the install of `fleet-dev`
// and the e2e suite, and every "# charts/fleet values" block of
// docs/operations.md and docs/cluster-access.md; the controller accepts what each renders.
func TestFleetChart_DefaultsAndDocumentedValuesRender(t *testing.T) {
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := [][]string{
		nil,
		// dev/devenv InstallController, with the e2e suite's value.
		{"--set", "image.tag=dev", "--set", "image.imagePullPolicy=Never", "--set", "agent.image.imagePullPolicy=Never",
			"--set", "agent.tlsMode=strict", "--set", "apiServerURL=https://10.0.0.1:6443", "--set-file", "apiServerCA=" + ca,
			"--set", "capi.namespaces={capi}"},
		{"--set", "bootstrap.enabled=false", "--set", "renderer.enabled=false", "--set", "proxy.enabled=false", "--set", "metrics.enabled=false"},
		{"--set", "proxy.endpoint.enabled=true", "--set", "proxy.endpoint.url=https://fleet-proxy.example.com:9443",
			"--set", "proxy.endpoint.serviceType=LoadBalancer", "--set", "proxy.endpoint.tlsSecretName=fleet-proxy-endpoint-tls"},
		{"--set", "logLevel=debug", "--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.serviceMonitor.interval=1m",
			"--set", "metrics.serviceMonitor.labels.release=prometheus", "--set", "imagePullSecrets[0].name=regcred",
			"--set", "bundleRendering.maxSize=100000000", "--set", "bundleRendering.memoryLimit=0.5Gi"},
	}
	var blocks [][][]byte
	for doc, want := range map[string]string{
		"../../docs/operations.md":     "the two of agent labels and staged rollouts",
		"../../docs/cluster-access.md": "the one of fleet-proxy's endpoint",
	} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		found := regexp.MustCompile("(?s)```yaml\n# charts/fleet values\n(.*?)```").FindAllSubmatch(b, -1)
		if len(found) == 0 {
			t.Fatalf("%s has no \"# charts/fleet values\" block, want %s", doc, want)
		}
		blocks = append(blocks, found...)
	}
	for i, b := range blocks {
		f := filepath.Join(t.TempDir(), "values.yaml")
		if err := os.WriteFile(f, b[1], 0o600); err != nil {
			t.Fatal(err)
		}
		cases = append(cases, []string{"-f", f})
		_ = i
	}
	for _, args := range cases {
		out, stderr, err := helmTemplateFleet(t, args...)
		if err != nil {
			t.Errorf("helm template %v: %v\n%s", args, err, stderr)
			continue
		}
		chartConfig(t, out)
	}
}

// TestCharts_LintCleanly: `helm lint` of both charts, with the Helm 4 and
// the Helm 3 CLI, prints no failure
// (papercut 20: the agent chart needs the values of hack/lint, which
// docs/operations.md names).
func TestCharts_LintCleanly(t *testing.T) {
	for _, args := range [][]string{
		{"lint", "--strict", "../../charts/fleet", "-n", "cattle-fleet-system"},
		{"lint", "--strict", "../../charts/fleet-agent", "-n", "cattle-fleet-system", "-f", "../../hack/lint/fleet-agent-values.yaml"},
	} {
		for _, h := range renderertest.HelmCLIs(t) {
			out, err := h.Command(t, args...).CombinedOutput()
			if err != nil || bytes.Contains(out, []byte("Fail")) || bytes.Contains(out, []byte("[ERROR]")) || bytes.Contains(out, []byte("[WARNING]")) {
				t.Errorf("%s %v: %v\n%s", h.Name, args, err, out)
			}
		}
	}
}

// TestFleetChart_ConfigValuesRoundTrip: a configuration given to the chart
// as the values ConfigValues names comes out of the chart's ConfigMap the
// same, field by field: the example's, the renderer tests' and one with
// every field set. So the mapping the schema is generated through is the
// one templates/configmap.yaml writes.
func TestFleetChart_ConfigValuesRoundTrip(t *testing.T) {
	var example struct {
		Data map[string]string `json:"data"`
	}
	exampleCM, err := os.ReadFile("../../examples/gitops/config/fleet-controller.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(exampleCM, &example); err != nil {
		t.Fatal(err)
	}
	testdata, err := os.ReadFile("../../renderer/testdata/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	full := `{apiServerURL: "http://x:6443", apiServerCA: "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUIKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo=",
agentTLSMode: strict, agentCheckinInterval: 45s, agentImage: "r.example.com:5000/fleet:1.2", agentImagePullPolicy: Never,
systemDefaultRegistry: reg.example.com, agentImagePullSecrets: [a, b], agentReplicas: 2,
agentLeaderElection: {leaseDuration: 31s, renewDeadline: 26s, retryPeriod: 11s},
agentProxy: {httpProxy: "http://p:3128", httpsProxy: "http://p:3129", noProxy: "10.0.0.0/8"}, manageAgent: false,
registrationTokenTTLRequired: true, importTokenTTL: 1h, requestCredentialTTL: 2h, offlineAfterMissedHeartbeats: 5,
agentRollout: {canary: {selector: {matchLabels: {example.com/ring: canary}}}, maxUnavailable: "10%", progressDeadline: 5m, autoRollback: true},
bootstrap: {enabled: false, namespace: mgmt, agentNamespace: fleet-agent-local},
insecureKubeconfig: {exec: true, tls: true, files: true, proxy: true}, kubeConfigSecretNamespaces: {"*": [kc], team-a: [kc-a]},
allowInsecureAPIServerURL: true, allowGitInsecureSkipTLSVerify: true, ignoreClusterRegistrationLabels: false, capiNamespaces: [capi, capi-2], capiClusterSelector: "a=b,c in (d)",
agentLabelKeys: [env, "team-*"], bundleMaxSize: 64Mi, bundleMaxResourceSize: 8Mi, bundleRenderTimeout: 1m,
bundleRenderMemoryLimit: 512Mi, bundleRenderConcurrency: 8}`
	for name, document := range map[string]string{
		"examples/gitops": example.Data[config.ConfigMapKey], "renderer/testdata": string(testdata), "every field": full,
	} {
		t.Run(name, func(t *testing.T) {
			want, err := config.Parse([]byte(document))
			if err != nil {
				t.Fatal(err)
			}
			var m map[string]any
			if err := yaml.Unmarshal([]byte(document), &m); err != nil {
				t.Fatal(err)
			}
			set := slices.Collect(maps.Keys(m))
			var args []string
			// The two fields the chart writes from values of another form.
			if img, ok := m["agentImage"].(string); ok {
				i := strings.LastIndex(img, ":")
				args = append(args, "--set", "agent.image.repository="+img[:i], "--set-string", "agent.image.tag="+img[i+1:])
				delete(m, "agentImage")
			}
			if _, ok := m["apiServerCA"]; ok {
				pem, _ := json.Marshal(string(want.APIServerCA))
				args = append(args, "--set-json", "apiServerCA="+string(pem))
				delete(m, "apiServerCA")
			}
			rest, _ := yaml.Marshal(m)
			args = append(args, setJSON(t, string(rest))...)
			out, stderr, err := helmTemplateFleet(t, args...)
			if err != nil {
				t.Fatalf("helm template %v: %v\n%s", args, err, stderr)
			}
			got := chartConfig(t, out)
			wantJSON, gotJSON := jsonFields(t, want), jsonFields(t, got)
			for _, k := range set {
				if !reflect.DeepEqual(gotJSON[k], wantJSON[k]) {
					t.Errorf("%s: the chart wrote %v, want %v", k, gotJSON[k], wantJSON[k])
				}
			}
			if name == "every field" {
				for k := range valuesschema.ConfigValues {
					if !slices.Contains(set, k) {
						t.Errorf("the document with every field does not set %s: add it", k)
					}
				}
			}
		})
	}
}

func jsonFields(t *testing.T, cfg *config.Config) map[string]any {
	t.Helper()
	data, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}
