package valuessecret_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/valuessecret"
)

// TestHash_IsFleetsHashOfTheSecretsData: the hash is the sha256 of the
// data as Go's encoding/json writes a map of byte slices (keys sorted,
// values base64), which is what Fleet's fleet apply puts in
// spec.valuesHash; written out by hand here.
func TestHash_IsFleetsHashOfTheSecretsData(t *testing.T) {
	data := map[string][]byte{
		"values.yaml": []byte(`{"a":1}`), // base64 eyJhIjoxfQ==
		"canary":      []byte(`{"b":2}`), // base64 eyJiIjoyfQ==
	}
	sum := sha256.Sum256([]byte(`{"canary":"eyJiIjoyfQ==","values.yaml":"eyJhIjoxfQ=="}`))
	if got, want := valuessecret.Hash(data), hex.EncodeToString(sum[:]); got != want {
		t.Errorf("Hash = %s, want %s", got, want)
	}
}

func bundle(hash string) *fleet.Bundle {
	return &fleet.Bundle{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ws", Name: "app"},
		Spec: fleet.BundleSpec{
			BundleDeploymentOptions: fleet.BundleDeploymentOptions{Helm: &fleet.HelmOptions{Chart: "chart"}},
			ValuesHash:              hash,
			Targets: []fleet.BundleTarget{
				{Name: "canary", ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"stage": "canary"}}},
				{Name: "other"},
				{ClusterSelector: &metav1.LabelSelector{}},
			},
		},
	}
}

func secret(typ corev1.SecretType, data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ws", Name: "app"}, Type: typ, Data: data}
}

// TestApply_SetsTheBundlesAndNamedTargetsValues: "values.yaml" becomes
// spec.helm.values, a key named like a target that target's values (JSON
// as Fleet writes it, YAML too); a target without a key, or without a
// name, keeps its own; the Bundle given is not changed.
func TestApply_SetsTheBundlesAndNamedTargetsValues(t *testing.T) {
	data := map[string][]byte{
		"values.yaml": []byte(`{"replicas":3,"image":{"tag":"v2"}}`),
		"canary":      []byte("replicas: 1\n"),
		"unknown":     []byte(`{"ignored":true}`),
	}
	b := bundle(valuessecret.Hash(data))
	b.Spec.Targets[1].Helm = &fleet.HelmOptions{Values: &fleet.GenericMap{Data: map[string]any{"own": "kept"}}}
	before := b.DeepCopy()

	got, err := valuessecret.Apply(b, secret(valuessecret.Type, data))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, b); diff != "" {
		t.Errorf("the Bundle given changed (-before +after):\n%s", diff)
	}
	want := map[string]any{"replicas": float64(3), "image": map[string]any{"tag": "v2"}}
	if diff := cmp.Diff(want, got.Spec.Helm.Values.Data); diff != "" {
		t.Errorf("spec.helm.values (-want +got):\n%s", diff)
	}
	if got.Spec.Helm.Chart != "chart" {
		t.Errorf("spec.helm.chart %q: the other helm options stay", got.Spec.Helm.Chart)
	}
	if diff := cmp.Diff(map[string]any{"replicas": float64(1)}, got.Spec.Targets[0].Helm.Values.Data); diff != "" {
		t.Errorf("target canary's values (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]any{"own": "kept"}, got.Spec.Targets[1].Helm.Values.Data); diff != "" {
		t.Errorf("target other's values (-want +got):\n%s", diff)
	}
	if got.Spec.Targets[2].Helm != nil {
		t.Errorf("the unnamed target got helm options %+v", got.Spec.Targets[2].Helm)
	}
}

// TestApply_RefusesWhatItCannotUse: each refusal names the Secret and what
// to do, says whether it is to be waited for, and never quotes the values.
func TestApply_RefusesWhatItCannotUse(t *testing.T) {
	const secretValue = "hunter2-do-not-print"
	good := map[string][]byte{"values.yaml": []byte(`{"password":"` + secretValue + `"}`)}
	cases := []struct {
		name    string
		hash    string
		secret  *corev1.Secret
		reason  string
		waiting bool
		says    []string
	}{
		{"values other than the hash names (fleet apply wrote the Secret, not yet the Bundle)", "0000", secret(valuessecret.Type, good),
			fleet.WaitingForValuesReason, true, []string{"Secret ws/app holds other values than the Bundle names", "spec.valuesHash 0000"}},
		{"a Secret of another type", valuessecret.Hash(good), secret(corev1.SecretTypeDockerConfigJson, good),
			fleet.ValuesSecretInvalidReason, false, []string{"Secret ws/app", "kubernetes.io/dockerconfigjson", "not a values Secret"}},
		{"values that are not a map", "", secret(valuessecret.Type, map[string][]byte{"values.yaml": []byte(`["` + secretValue + `"]`)}),
			fleet.ValuesSecretInvalidReason, false, []string{"key values.yaml of Secret ws/app is not a JSON or YAML map"}},
		{"a target's values that do not parse", "", secret("", map[string][]byte{"canary": []byte(`{"password": "` + secretValue)}),
			fleet.ValuesSecretInvalidReason, false, []string{"key canary of Secret ws/app"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			hash := c.hash
			if hash == "" {
				hash = valuessecret.Hash(c.secret.Data)
			}
			_, err := valuessecret.Apply(bundle(hash), c.secret)
			var p *valuessecret.Problem
			if !errors.As(err, &p) {
				t.Fatalf("err %v: want a Problem", err)
			}
			if p.Reason != c.reason || p.Waiting != c.waiting {
				t.Errorf("reason %s waiting %v, want %s %v", p.Reason, p.Waiting, c.reason, c.waiting)
			}
			for _, s := range c.says {
				if !strings.Contains(p.Message, s) {
					t.Errorf("message %q does not say %q", p.Message, s)
				}
			}
			if strings.Contains(p.Message, secretValue) || strings.Contains(p.Message, valuessecret.Hash(c.secret.Data)) && hash != valuessecret.Hash(c.secret.Data) {
				t.Errorf("message %q quotes the values or their hash", p.Message)
			}
		})
	}
}

// TestMissing_SaysWhereTheValuesAreAndWaits: a Bundle whose Secret is not
// written yet waits, and the message names the Secret.
func TestMissing_SaysWhereTheValuesAreAndWaits(t *testing.T) {
	p := valuessecret.Missing(bundle("x"))
	if !p.Waiting || p.Reason != fleet.WaitingForValuesReason || !strings.Contains(p.Message, "Secret ws/app, which does not exist") {
		t.Errorf("%+v", p)
	}
}
