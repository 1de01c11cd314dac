package review

import (
	"strings"
	"testing"

	"github.com/fluxcd/pkg/ssa"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gitops-fleet/fleet/dev/controlplane"
	"github.com/gitops-fleet/fleet/internal/apply"
	"github.com/gitops-fleet/fleet/internal/names"
	"github.com/gitops-fleet/fleet/internal/scheme"
	"github.com/gitops-fleet/fleet/renderer"
)

// TestLive: against a real API server holding the base agent as the
// controller applied it, the dry run of a redeployAgentGeneration bump
// names the agent's Deployment, and only it; an unreachable cluster is a
// LiveError, not a failed review.
func TestLive(t *testing.T) {
	env, err := controlplane.Start(t.Context(), controlplane.Options{NoControllerManager: true, ManifestDirs: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	cfg := env.Upstream.Config

	// The base agent, applied as the controller does.
	b, err := Load(example, "base", "config/fleet-controller.yaml")
	if err != nil {
		t.Fatal(err)
	}
	base, err := render(mustAgentRenderer(t), b, "fleet-default/dev-1", false)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	m := apply.NewManager(c)
	objs := make([]*unstructured.Unstructured, 0, len(base.objects))
	for _, o := range base.objects {
		objs = append(objs, o.DeepCopy())
	}
	m.SetOwnerLabels(objs, names.AgentBundle("dev-1"), names.ClusterNamespace("fleet-default", "dev-1"))
	ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "cattle-fleet-system"}}}
	if _, err := m.ApplyAllStaged(t.Context(), append([]*unstructured.Unstructured{ns}, objs...), ssa.DefaultApplyOptions()); err != nil {
		t.Fatal(err)
	}

	r := diff(t, copyTree(t, map[string][][2]string{
		"clusters/dev-1.yaml": {{"redeployAgentGeneration: 1", "redeployAgentGeneration: 2"}},
	}))
	r.Live(t.Context(), func(ws, name string) (*rest.Config, error) { return cfg, nil })
	got := r.Clusters[0]
	if got.LiveError != "" || len(got.Live) != 1 || got.Live[0] != "Deployment cattle-fleet-system/fleet-agent: configured" {
		t.Errorf("live: %q (error %q); want only the Deployment configured", got.Live, got.LiveError)
	}

	// No change at all on the cluster: nothing to say.
	r = diff(t, copyTree(t, nil))
	r.Live(t.Context(), func(ws, name string) (*rest.Config, error) { return cfg, nil })
	if len(r.Clusters[0].Live) != 0 {
		t.Errorf("an unchanged agent was dry-run: %v", r.Clusters[0].Live)
	}

	r = diff(t, copyTree(t, map[string][][2]string{
		"clusters/dev-1.yaml": {{"redeployAgentGeneration: 1", "redeployAgentGeneration: 2"}},
	}))
	r.Live(t.Context(), func(ws, name string) (*rest.Config, error) {
		return &rest.Config{Host: "https://127.0.0.1:1"}, nil
	})
	if got := r.Clusters[0]; got.LiveError == "" {
		t.Errorf("an unreachable cluster: live %v, no error", got.Live)
	}
	var out strings.Builder
	_ = r.Text(&out)
	if !strings.Contains(out.String(), "live:    could not ask the cluster") {
		t.Errorf("the report does not say the cluster could not be asked:\n%s", out.String())
	}
}

func mustAgentRenderer(t *testing.T) *renderer.AgentRenderer {
	t.Helper()
	r, err := renderer.NewAgentRenderer()
	if err != nil {
		t.Fatal(err)
	}
	return r
}
