package bundle

import (
	"sort"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/renderer"
)

// maxResourceKeys bounds status.resourceKey, so a Bundle of thousands of
// resources keeps a small status (Fleet calls the field informational).
const maxResourceKeys = 1000

// resourceKeys names the resources of a render, with the namespace they
// name (the options' namespace, when set, replaces it). The controller
// does not know which kinds are namespaced downstream, so a resource that
// names no namespace has none here, even when the agent puts it into
// defaultNamespace. A render that does not decode names none (the agent
// reports that failure).
func resourceKeys(out *renderer.Output, opts fleet.BundleDeploymentOptions) []fleet.ResourceKey {
	objs, err := out.Objects()
	if err != nil {
		return nil
	}
	keys := make([]fleet.ResourceKey, 0, len(objs))
	for _, o := range objs {
		k := fleet.ResourceKey{APIVersion: o.GetAPIVersion(), Kind: o.GetKind(), Namespace: o.GetNamespace(), Name: o.GetName()}
		if opts.TargetNamespace != "" && k.Namespace != "" {
			k.Namespace = opts.TargetNamespace
		}
		keys = append(keys, k)
	}
	return keys
}

// bundleResourceKey is status.resourceKey: the resources of every render
// of this reconcile (every distinct set of target options), each once,
// sorted, at most maxResourceKeys.
func bundleResourceKey(renders []*render) []fleet.ResourceKey {
	seen := map[fleet.ResourceKey]bool{}
	var out []fleet.ResourceKey
	for _, rd := range renders {
		for _, k := range rd.keys {
			if !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		return a.APIVersion < b.APIVersion
	})
	if len(out) > maxResourceKeys {
		out = out[:maxResourceKeys]
	}
	return out
}
