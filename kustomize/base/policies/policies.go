// Package policies embeds fleet's admission policies: every *.yaml file of
// this directory, the same files `kubectl apply -k kustomize/base` installs
// and `make generate` copies into charts/fleet. The controller compares them
// with what the API server holds and grants no registration while one is
// missing or differs (controller/admission). A policy file added here is
// picked up without naming it anywhere else in Go.
package policies

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

//go:embed *.yaml
var files embed.FS

// Kinds of the objects the controller checks.
const (
	KindPolicy  = "ValidatingAdmissionPolicy"
	KindBinding = "ValidatingAdmissionPolicyBinding"
	// Group is their API group (version v1).
	Group = "admissionregistration.k8s.io"
)

// Object is one ValidatingAdmissionPolicy or ValidatingAdmissionPolicyBinding
// as shipped.
type Object struct {
	// Kind is KindPolicy or KindBinding.
	Kind string
	// Name is the object's (cluster-scoped) name.
	Name string
	// File is the file of this directory it comes from.
	File string
	// Spec is the object's spec as written in the file (JSON types).
	Spec map[string]any
}

// String names the object as kubectl would: kind/name.
func (o Object) String() string { return o.Kind + "/" + o.Name }

// Objects returns every ValidatingAdmissionPolicy and
// ValidatingAdmissionPolicyBinding of the embedded files, sorted by kind and
// name. Objects of other kinds are left out: they are not admission policies
// the controller relies on.
func Objects() ([]Object, error) {
	return read(files)
}

func read(fsys fs.FS) ([]Object, error) {
	paths, err := fs.Glob(fsys, "*.yaml")
	if err != nil {
		return nil, err
	}
	var objs []Object
	seen := map[string]string{}
	for _, p := range paths {
		data, err := fs.ReadFile(fsys, p)
		if err != nil {
			return nil, err
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			var doc map[string]any
			if err := dec.Decode(&doc); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return nil, fmt.Errorf("admission policies: %s: %w", p, err)
			}
			if doc == nil {
				continue
			}
			kind, _ := doc["kind"].(string)
			apiVersion, _ := doc["apiVersion"].(string)
			if (kind != KindPolicy && kind != KindBinding) || !strings.HasPrefix(apiVersion, Group+"/") {
				continue
			}
			meta, _ := doc["metadata"].(map[string]any)
			name, _ := meta["name"].(string)
			spec, _ := doc["spec"].(map[string]any)
			if name == "" || spec == nil {
				return nil, fmt.Errorf("admission policies: %s: a %s without metadata.name or spec", p, kind)
			}
			o := Object{Kind: kind, Name: name, File: p, Spec: spec}
			if other, dup := seen[o.String()]; dup {
				return nil, fmt.Errorf("admission policies: %s is defined in %s and %s", o, other, p)
			}
			seen[o.String()] = p
			objs = append(objs, o)
		}
	}
	slices.SortFunc(objs, func(a, b Object) int { return strings.Compare(a.String(), b.String()) })
	return objs, nil
}
