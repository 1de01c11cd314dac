package token

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/charts"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/reconciler"
	"github.com/gitops-fleet/fleet/renderer"
	"github.com/gitops-fleet/fleet/renderer/agentvalues"
)

// The values file is what `helm install fleet-agent charts/fleet-agent -n
// cattle-fleet-system -f values.yaml` is given: it must pass the chart's
// schema and put the token into the bootstrap Secret.
func TestValues_InstallTheAgentChart(t *testing.T) {
	chart, err := renderer.LoadChartFS(charts.FleetAgent(), ".")
	if err != nil {
		t.Fatal(err)
	}
	tok := &fleet.ClusterRegistrationToken{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet-default", Name: "reg"}}
	cfg := &config.Config{APIServerURL: "https://upstream.example.com:6443", APIServerCA: []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")}
	for _, clientID := range []string{"", "my-cluster"} {
		tok.Spec.ClientID = clientID
		values, err := valuesFile(cfg, tok, "bearer-xyz")
		if err != nil {
			t.Fatal(err)
		}
		out, err := renderer.Render(renderer.Input{Chart: chart, ReleaseName: "fleet-agent", Namespace: config.DefaultSystemNamespace, Values: values})
		if err != nil {
			t.Fatalf("clientID %q: helm install with the values file fails: %v\n%s", clientID, err, values)
		}
		objs, err := out.Objects()
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, o := range objs {
			if o.GetKind() != "Secret" || o.GetName() != "fleet-agent-bootstrap" {
				continue
			}
			found = true
			data := o.Object["data"].(map[string]any)
			for k, want := range map[string]string{
				"apiServerURL": cfg.APIServerURL, "apiServerCA": string(cfg.APIServerCA), "token": "bearer-xyz",
				"tokenName": "reg", "clusterNamespace": "fleet-default", "systemRegistrationNamespace": config.DefaultSystemRegistrationNS,
			} {
				got, _ := base64.StdEncoding.DecodeString(data[k].(string))
				if string(got) != want {
					t.Errorf("bootstrap Secret %s = %q, want %q", k, got, want)
				}
			}
		}
		if !found {
			t.Error("the chart rendered no fleet-agent-bootstrap Secret")
		}
		if clientID != "" && !strings.Contains(string(out.YAML), clientID) {
			t.Errorf("clientID %q is not in the rendered agent", clientID)
		}
	}
}

// oldValuesFile is a values file as controllers before the one agent values
// type wrote it (keys of the bootstrap, image, TLS mode, check-in interval):
// admins keep such files, and the values Secrets of tokens made then hold one
// until the controller rewrites them.
const oldValuesFile = `agentTLSMode: system-store
apiServerCA: |
  -----BEGIN CERTIFICATE-----
  MIIB
  -----END CERTIFICATE-----
apiServerURL: https://upstream.example.com:6443
checkinInterval: 1m
clusterNamespace: fleet-default
image:
  imagePullPolicy: IfNotPresent
  repository: gitops-fleet/fleet
  tag: 0.1.0
systemRegistrationNamespace: cattle-fleet-clusters-system
token: bearer-old
tokenName: reg
`

func TestBearer_ReadsCurrentAndOldValuesFiles(t *testing.T) {
	tok := &fleet.ClusterRegistrationToken{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "reg"}}
	current, err := valuesFile(&config.Config{APIServerURL: "https://x", APIServerCA: []byte("ca")}, tok, "bearer-now")
	if err != nil {
		t.Fatal(err)
	}
	placeholder, err := valuesFile(&config.Config{APIServerURL: "https://x"}, tok, "")
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		data []byte
		want string
	}{
		"current":          {current, "bearer-now"},
		"old format":       {[]byte(oldValuesFile), "bearer-old"},
		"placeholder only": {placeholder, ""},
		"no values":        {nil, ""},
		"not YAML":         {[]byte("token: [1, 2"), ""},
	} {
		s := &corev1.Secret{Data: map[string][]byte{ValuesKey: tc.data}}
		if got := Bearer(s); got != tc.want {
			t.Errorf("%s: Bearer = %q, want %q", name, got, tc.want)
		}
	}
}

// A values file an admin kept from an older controller still installs the
// agent chart of this one.
func TestValues_OldValuesFilesStillInstall(t *testing.T) {
	chart, err := renderer.LoadChartFS(charts.FleetAgent(), ".")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := renderer.Render(renderer.Input{Chart: chart, ReleaseName: "fleet-agent", Namespace: config.DefaultSystemNamespace, Values: []byte(oldValuesFile)}); err != nil {
		t.Fatalf("an old values file no longer installs: %v", err)
	}
}

func TestExpiresAt_RoundsUpToWholeSeconds(t *testing.T) {
	created := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for ttl, want := range map[time.Duration]time.Time{
		12 * time.Hour:          created.Add(12 * time.Hour),
		1500 * time.Millisecond: created.Add(2 * time.Second),
		time.Nanosecond:         created.Add(time.Second),
	} {
		if got := expiresAt(created, ttl); !got.Equal(want) {
			t.Errorf("expiresAt(ttl %s) = %s, want %s", ttl, got, want)
		}
	}
}

func TestRequestedLifetime(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { e := now.Add(d); return &e }
	for _, tc := range []struct {
		name    string
		expires *time.Time
		want    time.Duration
	}{
		{"no TTL: a year", nil, 365 * 24 * time.Hour},
		{"the rest of the TTL and a minute", at(12 * time.Hour), 12*time.Hour + time.Minute + time.Second},
		{"at least the API minimum", at(3 * time.Second), 10*time.Minute + time.Second},
	} {
		if got := requestedLifetime(now, tc.expires); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestRenewAt(t *testing.T) {
	issued := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { e := issued.Add(d); return &e }
	year := 365 * 24 * time.Hour
	for _, tc := range []struct {
		name     string
		lifetime time.Duration
		expires  *time.Time
		want     time.Time // zero: never
	}{
		{"token outlives its registration token", 12*time.Hour + time.Minute, at(12 * time.Hour), time.Time{}},
		{"no TTL: a fifth of a year before expiry", year, nil, issued.Add(year - year/5)},
		{"capped by the API server: an hour before expiry", 4 * time.Hour, at(12 * time.Hour), issued.Add(3 * time.Hour)},
		{"short lifetime: half way, never at once", 30 * time.Minute, nil, issued.Add(15 * time.Minute)},
	} {
		got := renewAt(issued, issued.Add(tc.lifetime), tc.expires)
		if !got.Equal(tc.want) {
			t.Errorf("%s: renewAt = %s, want %s", tc.name, got, tc.want)
		}
		if !got.IsZero() && !got.After(issued) {
			t.Errorf("%s: a fresh token is due at once (renewal loop)", tc.name)
		}
	}
}

func TestSetStatus(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	expires := now.Add(time.Hour)
	cfg := &config.Config{APIServerURL: "https://x"}
	conflict := apierrors.NewConflict(schema.GroupResource{Resource: "secrets"}, "reg", errors.New("changed"))
	for _, tc := range []struct {
		name          string
		cfg           *config.Config
		secretName    string
		err           error
		wantStatus    metav1.ConditionStatus // "": condition left as it was
		wantReason    string
		wantSecret    string
		wantInMessage string
	}{
		{"ready", cfg, "reg", nil, metav1.ConditionTrue, fleet.SucceededReason, "reg", "helm install fleet-agent"},
		{"no apiServerURL", &config.Config{}, "reg", nil, metav1.ConditionFalse, fleet.MissingAPIServerURLReason, "reg", "apiServerURL"},
		{"waiting", cfg, "", reconciler.Wait(ObjectConflictReason, 0, "Secret ns/reg exists"), metav1.ConditionFalse, ObjectConflictReason, "", "Secret ns/reg exists"},
		{"failed", cfg, "", errors.New("boom"), metav1.ConditionFalse, fleet.ProgressingReason, "", "boom"},
		{"conflict keeps the condition", cfg, "", conflict, "", "", "", ""},
	} {
		tok := &fleet.ClusterRegistrationToken{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "reg", Generation: 3}}
		setStatus(tok, tc.cfg, tc.secretName, tc.err, &expires, now)
		if tok.Status.Expires == nil || !tok.Status.Expires.Time.Equal(expires) {
			t.Errorf("%s: expires = %v", tc.name, tok.Status.Expires)
		}
		if tok.Status.SecretName != tc.wantSecret {
			t.Errorf("%s: secretName = %q, want %q", tc.name, tok.Status.SecretName, tc.wantSecret)
		}
		c := meta.FindStatusCondition(tok.Status.Conditions, fleet.ReadyCondition)
		if tc.wantStatus == "" {
			if c != nil {
				t.Errorf("%s: condition set: %+v", tc.name, c)
			}
			continue
		}
		if c == nil || c.Status != tc.wantStatus || c.Reason != tc.wantReason || c.ObservedGeneration != 3 || !strings.Contains(c.Message, tc.wantInMessage) {
			t.Errorf("%s: Ready = %+v", tc.name, c)
		}
	}
	tok := &fleet.ClusterRegistrationToken{}
	setStatus(tok, cfg, "reg", nil, nil, now)
	if tok.Status.Expires != nil {
		t.Errorf("expires = %v without TTL", tok.Status.Expires)
	}
}

// An agent installed with `helm install -f values.yaml` and the token's
// values file renders the pod template its own Bundle (manageagent) applies
// after registration, for a controller configuration that sets every agent
// setting it has: adoption then restarts nothing. Both sides are the one
// agent values type (agentvalues.Values), built by its token and Cluster
// constructors; the install side goes through the YAML file, as helm reads
// it, with the labels an admin adds with --set-string.
func TestValues_AgentInstalledWithThemRendersItsBundlesPodTemplate(t *testing.T) {
	chart, err := renderer.LoadChartFS(charts.FleetAgent(), ".")
	if err != nil {
		t.Fatal(err)
	}
	bundleRenderer, err := renderer.NewAgentRenderer()
	if err != nil {
		t.Fatal(err)
	}
	replicas := int32(2)
	cfg := &config.Config{
		APIServerURL: "https://upstream.example.com:6443", APIServerCA: []byte("ca"),
		AgentImage: "registry.example.com:5000/team/fleet:1.2.3", AgentImagePullPolicy: "Always", AgentTLSMode: config.TLSModeStrict,
		AgentCheckinInterval: metav1.Duration{Duration: 90 * time.Second}, AgentReplicas: &replicas,
		AgentImagePullSecrets: []string{"regcred"}, SystemDefaultRegistry: "mirror.example.com",
		AgentLeaderElection: config.LeaderElection{LeaseDuration: metav1.Duration{Duration: time.Minute}, RenewDeadline: metav1.Duration{Duration: 40 * time.Second}, RetryPeriod: metav1.Duration{Duration: 15 * time.Second}},
		AgentProxy:          config.Proxy{HTTPProxy: "http://proxy:3128", HTTPSProxy: "http://proxy:3128", NoProxy: "10.0.0.0/8"},
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	tok := &fleet.ClusterRegistrationToken{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet-default", Name: "edge"}}
	values, err := valuesFile(cfg, tok, "bearer")
	if err != nil {
		t.Fatal(err)
	}
	installed, err := renderer.Render(renderer.Input{Chart: chart, ReleaseName: "fleet-agent", Namespace: config.DefaultSystemNamespace,
		Values: append(values, []byte("labels:\n  env: dev\n")...)})
	if err != nil {
		t.Fatalf("helm install with the values file fails: %v\n%s", err, values)
	}

	// The Cluster the registration makes, as the agent Bundle sees it
	// once the agent reported its namespace (controller/cluster/agentbundle.go).
	cluster := &fleet.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: "fleet-default", Name: "cluster-0123456789ab", Labels: map[string]string{"env": "dev"}},
		Spec:       fleet.ClusterSpec{ClientID: "kube-system-uid", AgentNamespace: config.DefaultSystemNamespace},
	}
	bv, err := agentvalues.ForCluster(cluster, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	bundle, err := bundleRenderer.Render(bv)
	if err != nil {
		t.Fatal(err)
	}

	spec := func(out *renderer.Output) map[string]any {
		t.Helper()
		objs, err := out.Objects()
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			if o.GetKind() == "Deployment" {
				s, _, _ := unstructured.NestedMap(o.Object, "spec")
				return s
			}
		}
		t.Fatal("no agent Deployment rendered")
		return nil
	}
	got, want := spec(installed), spec(bundle)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the helm-installed agent's Deployment differs from its Bundle's: adoption would restart it (-bundle +installed):\n%s", diff)
	}
	containers, _, _ := unstructured.NestedSlice(got, "template", "spec", "containers")
	if c := containers[0].(map[string]any); c["image"] != "mirror.example.com/registry.example.com:5000/team/fleet:1.2.3" || c["imagePullPolicy"] != "Always" {
		t.Errorf("agent container image %v pull policy %v: the configured agent image is not installed", c["image"], c["imagePullPolicy"])
	}
}
