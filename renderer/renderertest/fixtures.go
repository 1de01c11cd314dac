package renderertest

import (
	"errors"
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

// ReasonOf is the Bundle condition reason renderer.ReasonOf gives for err:
// the first Reason in its chain, else RenderFailed. It is here so that the
// tests of the renderer's leaf packages (bundlefiles, kustomize) need not
// link the renderer, whose graph their fuzz targets would compile.
func ReasonOf(err error) string {
	var r interface{ Reason() string }
	if errors.As(err, &r) {
		return r.Reason()
	}
	return fleet.RenderFailedReason
}
