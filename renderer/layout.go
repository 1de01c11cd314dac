package renderer

import (
	"path"
	"strings"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/chartpath"
)

// fleetLayout reads a Bundle's files as Fleet lays them out: Fleet's
// `fleet apply` puts every file of the directory into the Bundle (its
// fleet.yaml, a README, a chart's Chart.yaml) and sets no helm or
// kustomize option for a chart or kustomization at the root. So, as
// Fleet's agent does:
//   - a Chart.yaml at the root, with no helm.chart, makes the root the
//     chart;
//   - a kustomization.yaml at the root, with no kustomize.dir, makes the
//     root the kustomization;
//   - plain manifests leave out fleet.yaml, the files of a subdirectory
//     holding a chart (Chart.yaml) or another Bundle (fleet.yaml); the
//     files under overlays/ are yaml.overlays sources, never manifests.
//
// Options the Bundle sets win; the returned options are a copy.
func fleetLayout(files map[string][]byte, opts fleet.BundleDeploymentOptions) (map[string][]byte, fleet.BundleDeploymentOptions) {
	chart := opts.Helm != nil && (opts.Helm.Chart != "" || chartpath.Remote(opts.Helm))
	kustomize := opts.Kustomize != nil && opts.Kustomize.Dir != ""
	if !chart {
		if _, ok := files["Chart.yaml"]; ok {
			opts = *opts.DeepCopy()
			if opts.Helm == nil {
				opts.Helm = &fleet.HelmOptions{}
			}
			opts.Helm.Chart = "."
			chart = true
		}
	}
	if !kustomize {
		if _, ok := files["kustomization.yaml"]; ok {
			opts = *opts.DeepCopy()
			opts.Kustomize = &fleet.KustomizeOptions{Dir: "."}
			kustomize = true
		}
	}
	if chart || kustomize {
		return files, opts
	}
	var skip []string // directories left out
	for p := range files {
		if base := path.Base(p); p != base && (base == "fleet.yaml" || base == "fleet.yml" || base == "Chart.yaml") {
			skip = append(skip, path.Dir(p)+"/")
		}
	}
	out := make(map[string][]byte, len(files))
outer:
	for p, data := range files {
		// overlays/ stays: applyYAMLOverlays takes the yaml.overlays sources
		// from it and leaves the rest of it out.
		if p == "fleet.yaml" || p == "fleet.yml" {
			continue
		}
		for _, dir := range skip {
			if strings.HasPrefix(p, dir) {
				continue outer
			}
		}
		out[p] = data
	}
	return out, opts
}
