package renderer

import (
	"slices"
	"strings"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

// mergeLifecycleOptions lays a target's namespace lifecycle, downstream
// resources, YAML overlays and Helm release options (force, atomic,
// maxHistory) over out, as Fleet merges target customisations: flags are
// switched on by either side, a set createNamespace or maxHistory wins,
// overlays are appended (applied in order), downstream resources are added
// once each (kind and name).
func mergeLifecycleOptions(out *fleet.BundleDeploymentOptions, over fleet.BundleDeploymentOptions) {
	if over.CreateNamespace != nil {
		v := *over.CreateNamespace
		out.CreateNamespace = &v
	}
	out.DeleteNamespace = out.DeleteNamespace || over.DeleteNamespace
	out.DeleteCRDResources = out.DeleteCRDResources || over.DeleteCRDResources
	for _, r := range over.DownstreamResources {
		if !slices.ContainsFunc(out.DownstreamResources, func(o fleet.DownstreamResource) bool {
			return strings.EqualFold(o.Kind, r.Kind) && o.Name == r.Name
		}) {
			out.DownstreamResources = append(out.DownstreamResources, r)
		}
	}
	if over.YAML != nil {
		if out.YAML == nil {
			out.YAML = &fleet.YAMLOptions{}
		}
		out.YAML.Overlays = append(out.YAML.Overlays, over.YAML.Overlays...)
	}
	if h := over.Helm; h != nil {
		if out.Helm == nil {
			out.Helm = &fleet.HelmOptions{}
		}
		out.Helm.Force = out.Helm.Force || h.Force
		out.Helm.Atomic = out.Helm.Atomic || h.Atomic
		if h.MaxHistory != 0 {
			out.Helm.MaxHistory = h.MaxHistory
		}
	}
}
