package renderer_test

import (
	"slices"
	"testing"

	"k8s.io/utils/ptr"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/targeting"
	"github.com/gitops-fleet/fleet/renderer"
)

// With AllMatches the options of every selecting target are laid over the
// Bundle's in order: later targets win set values, flags add up, overlays
// and downstream resources accumulate (each resource once).
func TestOptionsFor_AllMatchesLaysEveryTargetOver(t *testing.T) {
	b := overlayBundle(fleet.TargetCustomizationModeAllMatches)
	b.Spec.DownstreamResources = []fleet.DownstreamResource{{Kind: "Secret", Name: "creds"}}
	b.Spec.Targets[0].BundleDeploymentOptions.DeleteNamespace = true
	b.Spec.Targets[0].BundleDeploymentOptions.Helm = &fleet.HelmOptions{MaxHistory: 2, Atomic: true}
	b.Spec.Targets[0].BundleDeploymentOptions.DownstreamResources = []fleet.DownstreamResource{{Kind: "secret", Name: "creds"}, {Kind: "ConfigMap", Name: "cfg"}}
	b.Spec.Targets[1].BundleDeploymentOptions.CreateNamespace = ptr.To(false)
	b.Spec.Targets[1].BundleDeploymentOptions.Helm = &fleet.HelmOptions{MaxHistory: 5, Force: true}
	c := cluster("p1", map[string]string{"env": "prod", "region": "eu"})

	opts, t0, err := renderer.OptionsFor(b, c, targeting.Groups{})
	if err != nil || t0 == nil || t0.Name != "prod" {
		t.Fatalf("target %v, err %v", t0, err)
	}
	if got := opts.YAML.Overlays; !slices.Equal(got, []string{"prod", "eu"}) {
		t.Errorf("overlays %v, want [prod eu]", got)
	}
	if !opts.DeleteNamespace || opts.CreateNamespace == nil || *opts.CreateNamespace {
		t.Errorf("deleteNamespace %v, createNamespace %v", opts.DeleteNamespace, opts.CreateNamespace)
	}
	if h := opts.Helm; h == nil || h.MaxHistory != 5 || !h.Atomic || !h.Force {
		t.Errorf("helm %+v, want maxHistory 5 (the later target), atomic and force", h)
	}
	if len(opts.DownstreamResources) != 2 {
		t.Errorf("downstream resources %v, want creds once and cfg", opts.DownstreamResources)
	}

	// FirstMatch: prod's options only.
	b.Spec.TargetCustomizationMode = ""
	opts, _, err = renderer.OptionsFor(b, c, targeting.Groups{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(opts.YAML.Overlays, []string{"prod"}) || opts.CreateNamespace != nil || opts.Helm.MaxHistory != 2 {
		t.Errorf("FirstMatch took more than the first target: %+v", opts)
	}
}
