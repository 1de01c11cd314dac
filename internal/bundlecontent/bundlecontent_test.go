package bundlecontent

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

func TestRoundTripAndIntegrity(t *testing.T) {
	m := []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n")
	data, err := Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	s := &corev1.Secret{Type: SecretType, Data: data}
	got, err := Decode(s, ManifestID(m))
	if err != nil || string(got) != string(m) {
		t.Fatalf("round trip: %q %v", got, err)
	}
	if _, err := Decode(s, ManifestID([]byte("other"))); err == nil || !strings.Contains(err.Error(), "has not written them yet") {
		t.Errorf("stale content accepted: %v", err)
	}
	s.Type = corev1.SecretTypeOpaque
	if _, err := Decode(s, ""); err == nil {
		t.Error("wrong type accepted")
	}
}

func TestDeploymentIDChangesWithOptions(t *testing.T) {
	a := DeploymentID("s-1", fleet.BundleDeploymentOptions{})
	b := DeploymentID("s-1", fleet.BundleDeploymentOptions{DefaultNamespace: "x"})
	if a == b || SplitDeploymentID(a) != "s-1" {
		t.Errorf("%s %s", a, b)
	}
}
