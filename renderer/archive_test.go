package renderer

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/renderer/agentvalues"
)

// An agent chart kept as an archive (with an agent revision) renders what
// the embedded chart renders, and hashes alike: a rollback to it changes
// nothing for a Cluster that never left it.
func TestAgentRendererArchive_RendersAsTheEmbeddedChart(t *testing.T) {
	r, err := NewAgentRenderer()
	if err != nil {
		t.Fatal(err)
	}
	a, err := r.ChartArchive()
	if err != nil {
		t.Fatal(err)
	}
	again, err := r.ChartArchive()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, again) {
		t.Fatal("the same chart gave two different archives")
	}
	back, err := NewAgentRendererArchive(a)
	if err != nil {
		t.Fatal(err)
	}
	if back.ChartDigest() != r.ChartDigest() {
		t.Fatalf("digest %s from the archive, %s embedded", back.ChartDigest(), r.ChartDigest())
	}
	c := &fleet.Cluster{Spec: fleet.ClusterSpec{ClientID: "abc"}}
	c.Namespace, c.Name = "fleet-default", "one"
	v, err := agentvalues.ForCluster(c, &config.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want, err := r.Render(v)
	if err != nil {
		t.Fatal(err)
	}
	got, err := back.Render(v)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want.YAML), string(got.YAML)); diff != "" {
		t.Fatalf("render from the archive differs (-embedded +archive):\n%s", diff)
	}
	if _, err := NewAgentRendererArchive([]byte("not a chart")); err == nil {
		t.Fatal("garbage loaded as a chart")
	}
}
