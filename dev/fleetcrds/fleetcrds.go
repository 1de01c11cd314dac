// Package fleetcrds holds Rancher Fleet's published CRDs as test data
// (testdata/fleet-crds/README.md names their source and commit) and turns a
// CRD's openAPIV3Schema into a flat set of paths, so tests compare our CRDs
// with Fleet's field by field. A test helper: product code never imports it.
package fleetcrds

import (
	"embed"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

//go:embed testdata/fleet-crds/*.yaml
var fleetFS embed.FS

// Version is the API version the schemas are read at.
const Version = "v1alpha1"

// Fleet is Fleet's CRD of a resource (its plural: bundles,
// bundledeployments, gitrepos, gitreporestrictions).
func Fleet(plural string) (*apiextv1.CustomResourceDefinition, error) {
	b, err := fleetFS.ReadFile("testdata/fleet-crds/fleet.cattle.io_" + plural + ".yaml")
	if err != nil {
		return nil, err
	}
	return decode(b)
}

// Ours is this repository's generated CRD of a resource
// (charts/fleet/crds, written by make generate).
func Ours(plural string) (*apiextv1.CustomResourceDefinition, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return nil, fmt.Errorf("cannot locate the repository")
	}
	b, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "charts", "fleet", "crds", "fleet.cattle.io_"+plural+".yaml"))
	if err != nil {
		return nil, err
	}
	return decode(b)
}

func decode(b []byte) (*apiextv1.CustomResourceDefinition, error) {
	var crd apiextv1.CustomResourceDefinition
	if err := yaml.Unmarshal(b, &crd); err != nil {
		return nil, err
	}
	return &crd, nil
}

// Schema is the openAPIV3Schema of the CRD's v1alpha1 version.
func Schema(crd *apiextv1.CustomResourceDefinition) (*apiextv1.JSONSchemaProps, error) {
	for _, v := range crd.Spec.Versions {
		if v.Name == Version && v.Schema != nil && v.Schema.OpenAPIV3Schema != nil {
			return v.Schema.OpenAPIV3Schema, nil
		}
	}
	return nil, fmt.Errorf("%s has no %s schema", crd.Name, Version)
}

// Node is what a schema says of one path.
type Node struct {
	Type            string
	IntOrString     bool
	PreserveUnknown bool
	// Map: the object has additionalProperties (a map; its values are
	// the path + "{}").
	Map      bool
	Nullable bool
	// Element: the path is a list item ("[]") or a map value ("{}"),
	// where a null cannot be pruned and so is refused unless nullable.
	Element bool
	// Required are the properties the object requires.
	Required []string
	// Restrictions name the value checks (enum, pattern, maxLength, ...).
	Restrictions []string
}

// Paths flattens a schema: "spec.helm.values", a list's items
// "spec.targets[]", their fields "spec.targets[].name", a map's values
// "spec.namespaceLabels{}". The root itself is not a path.
func Paths(s *apiextv1.JSONSchemaProps) map[string]Node {
	out := map[string]Node{}
	walk(out, "", s, false)
	delete(out, "")
	return out
}

func walk(out map[string]Node, path string, s *apiextv1.JSONSchemaProps, element bool) {
	n := Node{
		Type: s.Type, IntOrString: s.XIntOrString, Nullable: s.Nullable, Element: element,
		PreserveUnknown: s.XPreserveUnknownFields != nil && *s.XPreserveUnknownFields,
		Required:        append([]string(nil), s.Required...),
	}
	sort.Strings(n.Required)
	if len(s.Enum) > 0 {
		n.Restrictions = append(n.Restrictions, "enum")
	}
	if s.Pattern != "" {
		n.Restrictions = append(n.Restrictions, "pattern")
	}
	if s.MaxLength != nil {
		n.Restrictions = append(n.Restrictions, "maxLength")
	}
	if s.MinLength != nil && *s.MinLength > 0 {
		n.Restrictions = append(n.Restrictions, "minLength")
	}
	if s.Minimum != nil {
		n.Restrictions = append(n.Restrictions, "minimum")
	}
	if s.Maximum != nil {
		n.Restrictions = append(n.Restrictions, "maximum")
	}
	if s.MaxItems != nil {
		n.Restrictions = append(n.Restrictions, "maxItems")
	}
	if len(s.XValidations) > 0 {
		n.Restrictions = append(n.Restrictions, "x-kubernetes-validations")
	}
	prefix := path
	if prefix != "" {
		prefix += "."
	}
	for name, p := range s.Properties {
		walk(out, prefix+name, &p, false)
	}
	if s.Items != nil && s.Items.Schema != nil {
		walk(out, path+"[]", s.Items.Schema, true)
	}
	if s.AdditionalProperties != nil {
		n.Map = true
		if s.AdditionalProperties.Schema != nil {
			walk(out, path+"{}", s.AdditionalProperties.Schema, true)
		}
	}
	out[path] = n
}

// Under lists the paths starting with prefix + "." (or "[]", "{}"),
// sorted.
func Under(paths map[string]Node, prefix string) []string {
	var out []string
	for p := range paths {
		if len(p) > len(prefix) && p[:len(prefix)] == prefix {
			switch p[len(prefix)] {
			case '.', '[', '{':
				out = append(out, p)
			}
		}
	}
	sort.Strings(out)
	return out
}
