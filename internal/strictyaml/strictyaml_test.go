package strictyaml_test

import (
	"strings"
	"testing"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/strictyaml"
)

// TestUnmarshal_UnknownFieldSaysWhatWasMeant: a misspelt field is refused
// and the error names the field of the same object it is closest to, at
// any depth (through lists and inline structs); a field near nothing gets
// no guess.
func TestUnmarshal_UnknownFieldSaysWhatWasMeant(t *testing.T) {
	for _, tt := range []struct {
		name string
		into any
		doc  string
		want []string
		not  string
	}{
		{"a Cluster's spec", &fleet.Cluster{}, "kind: Cluster\nspec:\n  agentToleration: []\n",
			[]string{`unknown field "spec.agentToleration", did you mean "agentTolerations"?`}, ""},
		{"in a list", &fleet.Bundle{}, "spec:\n  targets:\n  - clusterNme: x\n",
			[]string{`unknown field "spec.targets[0].clusterNme", did you mean "clusterName"?`}, ""},
		{"another case", &fleet.Bundle{}, "spec:\n  Helm: {}\n",
			[]string{`unknown field "spec.Helm", did you mean "helm"?`}, ""},
		{"metadata (inline ObjectMeta)", &fleet.Cluster{}, "metadata:\n  nmae: x\n",
			[]string{`unknown field "metadata.nmae", did you mean "name"?`}, ""},
		{"the controller configuration", &config.Config{}, "agentTLSmode: strict\n",
			[]string{`unknown field "agentTLSmode", did you mean "agentTLSMode"?`}, ""},
		{"nothing near", &fleet.Cluster{}, "spec:\n  replicas: 2\n",
			[]string{`unknown field "spec.replicas"`}, "did you mean"},
		{"two at once", &fleet.Cluster{}, "spec:\n  clientId: a\n  agentNamespce: b\n",
			[]string{`"spec.clientId", did you mean "clientID"?`, `"spec.agentNamespce", did you mean "agentNamespace"?`}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := strictyaml.Unmarshal([]byte(tt.doc), tt.into)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if tt.not != "" && strings.Contains(err.Error(), tt.not) {
				t.Errorf("error %q has %q", err, tt.not)
			}
		})
	}
	if err := strictyaml.Unmarshal([]byte("kind: Cluster\nspec:\n  clientID: a\n"), &fleet.Cluster{}); err != nil {
		t.Errorf("a valid Cluster: %v", err)
	}
}
