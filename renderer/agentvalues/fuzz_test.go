package agentvalues

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/config"
)

// FuzzParseAgentValues feeds arbitrary bytes to the values file parser (the
// controller reads a token's values Secret back with it, and tests read what
// a person installing the agent gets): it never panics, and what it accepts
// writes back to a file that parses to the same values.
func FuzzParseAgentValues(f *testing.F) {
	tok := &fleet.ClusterRegistrationToken{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet-default", Name: "edge"}, Spec: fleet.ClusterRegistrationTokenSpec{ClientID: "edge-1"}}
	v, err := ForToken(tok, &config.Config{APIServerURL: "https://upstream.example.com:6443", APIServerCA: []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")}, "bearer")
	if err != nil {
		f.Fatal(err)
	}
	seed, err := v.YAML()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte(""))
	f.Add([]byte("token: [1, 2]\n"))
	f.Add([]byte("image: {repository: r, tag: 1}\nunknown: x\n"))
	f.Add([]byte("apiServerURL: &a x\ntoken: *a\n"))
	f.Add([]byte("{\"token\": \"\\u00ff\", \"image\": null}"))
	f.Add([]byte("resources: {limits: {cpu: 1000m}}\ntolerations: [{key: k, tolerationSeconds: 3}]\nenv: null\n"))
	f.Add([]byte("resourCes: {limits: {}}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := Parse(data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "parsing agent values") {
				t.Fatalf("error %q does not say what failed", err)
			}
			return
		}
		out, err := v.YAML()
		if err != nil {
			t.Fatalf("parsed values do not marshal: %v", err)
		}
		again, err := Parse(out)
		if err != nil {
			t.Fatalf("written values do not parse: %v\n%s", err, out)
		}
		// An empty map or list and none are the same values to Helm (the
		// chart's default is empty): omitempty writes neither.
		if diff := cmp.Diff(v, again, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("values changed on the way through a file (-parsed +again):\n%s", diff)
		}
	})
}
