package renderer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

// OverlaysDir holds the yaml.overlays of a plain-manifest Bundle:
// overlays/<name>/<path> replaces the Bundle's file <path>, and
// overlays/<name>/<dir>/<file>_patch.<ext> patches <dir>/<file>.<ext>.
// Files under it are never manifests themselves.
const OverlaysDir = "overlays"

// applyYAMLOverlays returns the plain-manifest files of a Bundle after its
// yaml.overlays, applied in the order given (as Fleet does): within one
// overlay, its replacing and new files first, then its patches, each in
// path order, so a patch may patch a file its own overlay replaced. A
// patch is a JSON patch (RFC 6902) when it is a list, a strategic merge
// patch when the file it patches is a Kubernetes built-in kind, else a
// JSON merge patch (RFC 7386). The files under overlays/ are dropped.
// An overlay the Bundle has no files for, a patch without its file, a
// patch of a file with several documents, or a patch that does not apply
// is an error naming the file.
func applyYAMLOverlays(files map[string][]byte, overlays []string) (map[string][]byte, error) {
	out := make(map[string][]byte, len(files))
	for p, data := range files {
		if !strings.HasPrefix(p, OverlaysDir+"/") {
			out[p] = data
		}
	}
	for i, name := range overlays {
		if name == "" || name != path.Clean(name) || strings.Contains(name, "/") || name == "." || name == ".." {
			return nil, fmt.Errorf("yaml.overlays[%d] %q must be the name of a directory under %s/", i, name, OverlaysDir)
		}
		prefix := OverlaysDir + "/" + name + "/"
		var replace, patches []string
		for p := range files {
			rel, ok := strings.CutPrefix(p, prefix)
			if !ok {
				continue
			}
			if _, ok := patchTarget(rel); ok {
				patches = append(patches, rel)
			} else {
				replace = append(replace, rel)
			}
		}
		if len(replace)+len(patches) == 0 {
			return nil, fmt.Errorf("yaml.overlays[%d] %q: the Bundle has no files under %s", i, name, prefix)
		}
		sort.Strings(replace)
		sort.Strings(patches)
		for _, rel := range replace {
			out[rel] = files[prefix+rel]
		}
		for _, rel := range patches {
			target, _ := patchTarget(rel)
			base, ok := out[target]
			if !ok {
				return nil, fmt.Errorf("yaml overlay %s patches %s, which is not in the Bundle", prefix+rel, target)
			}
			patched, err := patchFile(base, files[prefix+rel])
			if err != nil {
				return nil, fmt.Errorf("yaml overlay %s does not apply to %s: %w", prefix+rel, target, err)
			}
			out[target] = patched
		}
	}
	return out, nil
}

// patchTarget returns the file a patch file patches: a_patch.yaml patches
// a.yaml in the same directory.
func patchTarget(rel string) (string, bool) {
	dir, base := path.Split(rel)
	if !strings.Contains(base, "_patch.") {
		return "", false
	}
	return dir + strings.Replace(base, "_patch.", ".", 1), true
}

// patchFile patches one single-document YAML or JSON file; the result is
// JSON (which is YAML).
func patchFile(base, patch []byte) ([]byte, error) {
	docs, err := jsonDocuments(base)
	if err != nil {
		return nil, fmt.Errorf("the file is not YAML: %w", err)
	}
	if len(docs) != 1 {
		return nil, fmt.Errorf("the file has %d documents; a patch applies to a file with exactly one", len(docs))
	}
	original := docs[0]
	p, err := yaml.YAMLToJSON(patch)
	if err != nil {
		return nil, fmt.Errorf("the patch is not YAML: %w", err)
	}
	p = bytes.TrimSpace(p)
	switch {
	case bytes.HasPrefix(p, []byte("[")):
		jp, err := jsonpatch.DecodePatch(p)
		if err != nil {
			return nil, fmt.Errorf("the JSON patch is not valid: %w", err)
		}
		return jp.Apply(original)
	case !bytes.HasPrefix(p, []byte("{")):
		return nil, fmt.Errorf("the patch is neither a map (merge patch) nor a list (JSON patch)")
	}
	if typed := builtinType(original); typed != nil {
		return strategicpatch.StrategicMergePatch(original, p, typed)
	}
	return jsonpatch.MergePatch(original, p)
}

// jsonDocuments returns the non-empty documents of a YAML or JSON stream as
// JSON.
func jsonDocuments(data []byte) ([][]byte, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out [][]byte
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, err
		}
		if t := bytes.TrimSpace(raw); len(t) > 0 && !bytes.Equal(t, []byte("null")) {
			out = append(out, t)
		}
	}
}

// builtinType returns a value of the file's kind when it is a Kubernetes
// built-in kind (strategic merge patches need its Go type), else nil.
func builtinType(doc []byte) any {
	var tm struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if json.Unmarshal(doc, &tm) != nil || tm.Kind == "" {
		return nil
	}
	gv, err := schema.ParseGroupVersion(tm.APIVersion)
	if err != nil {
		return nil
	}
	obj, err := scheme.Scheme.New(gv.WithKind(tm.Kind))
	if err != nil {
		return nil
	}
	return obj
}

func yamlOverlays(opts fleet.BundleDeploymentOptions) []string {
	if opts.YAML == nil {
		return nil
	}
	return opts.YAML.Overlays
}
