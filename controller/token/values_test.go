package token

import (
	"encoding/base64"
	"errors"
	"github.com/google/go-cmp/cmp"
	"strings"
	"testing"
	"time"

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
		values, err := NewValues(cfg, tok, "bearer-xyz").Marshal()
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

func TestValues_RoundTrip(t *testing.T) {
	tok := &fleet.ClusterRegistrationToken{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "reg"}}
	v := NewValues(&config.Config{APIServerURL: "https://x", APIServerCA: []byte("ca")}, tok, "t")
	b, err := v.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseValues(b)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(v, got); diff != "" {
		t.Fatalf("round trip (-want +got):\n%s", diff)
	}
	if strings.Contains(string(b), "clientID") {
		t.Errorf("clientID written though the token has none:\n%s", b)
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

// An agent installed with the token's values runs the image and TLS mode the
// controller is configured with, as its own Bundle (manageagent) will: a
// different image there would restart the agent at adoption.
func TestValues_CarryTheConfiguredAgentImageAndTLSMode(t *testing.T) {
	chart, err := renderer.LoadChartFS(charts.FleetAgent(), ".")
	if err != nil {
		t.Fatal(err)
	}
	tok := &fleet.ClusterRegistrationToken{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet-default", Name: "reg"}}
	cfg := &config.Config{APIServerURL: "https://upstream.example.com:6443", APIServerCA: []byte("ca"),
		AgentImage: "registry.example.com:5000/team/fleet:1.2.3", AgentImagePullPolicy: "Always", AgentTLSMode: config.TLSModeStrict}
	values, err := NewValues(cfg, tok, "bearer").Marshal()
	if err != nil {
		t.Fatal(err)
	}
	out, err := renderer.Render(renderer.Input{Chart: chart, ReleaseName: "fleet-agent", Namespace: config.DefaultSystemNamespace, Values: values})
	if err != nil {
		t.Fatalf("%v\n%s", err, values)
	}
	objs, err := out.Objects()
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		c := containers[0].(map[string]any)
		if c["image"] != cfg.AgentImage || c["imagePullPolicy"] != "Always" {
			t.Errorf("agent container image %v pull policy %v, want %s Always", c["image"], c["imagePullPolicy"], cfg.AgentImage)
		}
		return
	}
	t.Fatal("no agent Deployment rendered")
}

// FuzzParseValues feeds arbitrary bytes to the values file parser (the
// controller reads its own values Secret back with it, and tests read what
// a person installing the agent gets): it never panics, and what it
// accepts writes back to a file that parses to the same values.
func FuzzParseValues(f *testing.F) {
	tok := &fleet.ClusterRegistrationToken{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet-default", Name: "edge"}, Spec: fleet.ClusterRegistrationTokenSpec{ClientID: "edge-1"}}
	seed, err := NewValues(&config.Config{APIServerURL: "https://upstream.example.com:6443", APIServerCA: []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")}, tok, "bearer").Marshal()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte(""))
	f.Add([]byte("token: [1, 2]\n"))
	f.Add([]byte("image: {repository: r, tag: 1}\nunknown: x\n"))
	f.Add([]byte("apiServerURL: &a x\ntoken: *a\n"))
	f.Add([]byte("{\"token\": \"\\u00ff\", \"image\": null}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := ParseValues(data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "parsing agent values") {
				t.Fatalf("error %q does not say what failed", err)
			}
			return
		}
		out, err := v.Marshal()
		if err != nil {
			t.Fatalf("parsed values do not marshal: %v", err)
		}
		again, err := ParseValues(out)
		if err != nil {
			t.Fatalf("written values do not parse: %v\n%s", err, out)
		}
		if diff := cmp.Diff(v, again); diff != "" {
			t.Fatalf("values changed on the way through a file (-parsed +again):\n%s", diff)
		}
	})
}
