package bundle

import (
	"bufio"
	"bytes"
	"sort"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

// maxResourceKeys bounds status.resourceKey, so a Bundle of thousands of
// resources keeps a small status (Fleet calls the field informational).
const maxResourceKeys = 1000

// resourceKeys names the resources of a render, with the namespace they
// name (the options' namespace, when set, replaces it). The controller
// does not know which kinds are namespaced downstream, so a resource that
// names no namespace has none here, even when the agent puts it into
// defaultNamespace. The render is an author's output: it is read one
// document at a time into four fields (never whole objects), and at most
// maxResourceKeys documents, so it costs the controller little memory.
// What does not read as an object names nothing (the agent reports it).
func resourceKeys(manifests []byte, opts fleet.BundleDeploymentOptions) []fleet.ResourceKey {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(manifests)))
	var keys []fleet.ResourceKey
	for len(keys) < maxResourceKeys {
		doc, err := r.Read()
		if err != nil {
			break // io.EOF, or a document too large to be one object
		}
		var m struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		}
		if yaml.Unmarshal(doc, &m) != nil || m.Kind == "" {
			continue
		}
		k := fleet.ResourceKey{APIVersion: m.APIVersion, Kind: m.Kind, Namespace: m.Metadata.Namespace, Name: m.Metadata.Name}
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
