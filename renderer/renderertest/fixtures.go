package renderertest

import (
	"os"
	"testing"

	"sigs.k8s.io/yaml"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/config"
)

// LoadConfig reads a controller configuration file, such as the renderer's
// testdata/config.yaml, which its golden agent renders are made from.
func LoadConfig(t testing.TB, path string) *config.Config {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// LoadCluster reads a Cluster manifest, refusing unknown fields.
func LoadCluster(t testing.TB, path string) *fleet.Cluster {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c := &fleet.Cluster{}
	if err := yaml.UnmarshalStrict(data, c); err != nil {
		t.Fatal(err)
	}
	return c
}
