// Package comparepatch says what drift detection leaves out, from a Bundle's
// diff.comparePatches, with Fleet's meaning: the agent's drift check and
// anything that reports drift the way the agent does use it, so both see
// the same drift.
//
// Per comparePatch:
//   - jsonPointers (RFC 6901) are removed from both the live object and the
//     object the bundle would make of it before they are compared. They
//     apply to objects whose API group (from apiVersion; the version does
//     not matter) and kind match the patch's (glob patterns, "*" matching
//     any), and whose name and namespace equal the patch's; an empty name
//     or namespace matches every one.
//   - operations other than "ignore" are JSON patch operations (RFC 6902:
//     Fleet's documented use is "remove") applied to both sides, to the
//     object of exactly that apiVersion, kind, namespace and name. An
//     operation whose path is not there is skipped for that object.
//   - an operation "ignore" leaves out, when missing, the objects of
//     exactly that apiVersion and kind in exactly that namespace whose name
//     the patch's name matches (empty: every name; otherwise equal, or a
//     regular expression that matches part of it): a missing object is not
//     drift. A changed object is still drift, as in Fleet.
package comparepatch

import (
	"encoding/json"
	"fmt"
	"path"
	"regexp"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

// IgnoreOp is the operation that leaves a missing object out.
const IgnoreOp = "ignore"

// Rules are the compiled comparePatches of one BundleDeployment. A nil
// *Rules leaves nothing out.
type Rules struct {
	pointers []pointerRule
	ops      []opRule
	ignores  []ignoreRule
}

type pointerRule struct {
	group, kind, name, namespace string
	patch                        jsonpatch.Patch
}

type opRule struct {
	gvk             schema.GroupVersionKind
	name, namespace string
	patch           jsonpatch.Patch
}

type ignoreRule struct {
	gvk             schema.GroupVersionKind
	name, namespace string
	re              *regexp.Regexp
}

var validOps = map[string]bool{"add": true, "remove": true, "replace": true, "move": true, "copy": true, "test": true}

// New compiles d; nil or empty gives nil. An error names the comparePatch
// and says what to fix.
func New(d *fleet.DiffOptions) (*Rules, error) {
	if d == nil || len(d.ComparePatches) == 0 {
		return nil, nil
	}
	r := &Rules{}
	for i, cp := range d.ComparePatches {
		where := fmt.Sprintf("diff.comparePatches[%d]", i)
		gv, err := schema.ParseGroupVersion(cp.APIVersion)
		if err != nil {
			return nil, fmt.Errorf("%s: apiVersion %q is not a valid API version: %v", where, cp.APIVersion, err)
		}
		if _, err := path.Match(gv.Group, ""); err != nil {
			return nil, fmt.Errorf("%s: apiVersion %q is not a valid pattern: %v", where, cp.APIVersion, err)
		}
		if _, err := path.Match(cp.Kind, ""); err != nil {
			return nil, fmt.Errorf("%s: kind %q is not a valid pattern: %v", where, cp.Kind, err)
		}
		for j, p := range cp.JsonPointers {
			patch, err := decode(map[string]string{"op": "remove", "path": p})
			if err != nil {
				return nil, fmt.Errorf("%s.jsonPointers[%d] %q: %v", where, j, p, err)
			}
			r.pointers = append(r.pointers, pointerRule{group: gv.Group, kind: cp.Kind, name: cp.Name, namespace: cp.Namespace, patch: patch})
		}
		gvk := gv.WithKind(cp.Kind)
		for j, op := range cp.Operations {
			if op.Op == IgnoreOp {
				ir := ignoreRule{gvk: gvk, name: cp.Name, namespace: cp.Namespace}
				if cp.Name != "" {
					if ir.re, err = regexp.Compile(cp.Name); err != nil {
						return nil, fmt.Errorf("%s: name %q of an ignore operation is neither a name nor a valid regular expression: %v", where, cp.Name, err)
					}
				}
				r.ignores = append(r.ignores, ir)
				continue
			}
			if !validOps[op.Op] {
				return nil, fmt.Errorf("%s.operations[%d]: op %q is not a JSON patch operation (add, remove, replace, move, copy, test) nor ignore", where, j, op.Op)
			}
			m := map[string]string{"op": op.Op, "path": op.Path}
			if op.Op == "add" || op.Op == "replace" || op.Op == "test" {
				m["value"] = op.Value
			}
			if op.Op == "move" || op.Op == "copy" {
				m["from"] = op.Value
			}
			patch, err := decode(m)
			if err != nil {
				return nil, fmt.Errorf("%s.operations[%d]: %v", where, j, err)
			}
			r.ops = append(r.ops, opRule{gvk: gvk, name: cp.Name, namespace: cp.Namespace, patch: patch})
		}
	}
	return r, nil
}

func decode(op map[string]string) (jsonpatch.Patch, error) {
	b, err := json.Marshal([]map[string]string{op})
	if err != nil {
		return nil, err
	}
	return jsonpatch.DecodePatch(b)
}

// IgnoresMissing reports whether u, missing from the cluster, is not drift.
func (r *Rules) IgnoresMissing(u *unstructured.Unstructured) bool {
	if r == nil {
		return false
	}
	for _, ir := range r.ignores {
		if ir.gvk != u.GroupVersionKind() || ir.namespace != u.GetNamespace() {
			continue
		}
		if ir.name == "" || ir.name == u.GetName() || ir.re.MatchString(u.GetName()) {
			return true
		}
	}
	return false
}

// Normalize returns a copy of u without what the rules leave out, and
// whether any rule applied to it. u is not changed.
func (r *Rules) Normalize(u *unstructured.Unstructured) (*unstructured.Unstructured, bool, error) {
	if r == nil {
		return u, false, nil
	}
	var patches []jsonpatch.Patch
	gvk := u.GroupVersionKind()
	for _, p := range r.pointers {
		if glob(p.group, gvk.Group) && glob(p.kind, gvk.Kind) &&
			(p.name == "" || p.name == u.GetName()) && (p.namespace == "" || p.namespace == u.GetNamespace()) {
			patches = append(patches, p.patch)
		}
	}
	for _, p := range r.ops {
		if p.gvk == gvk && p.name == u.GetName() && p.namespace == u.GetNamespace() {
			patches = append(patches, p.patch)
		}
	}
	if len(patches) == 0 {
		return u, false, nil
	}
	doc, err := json.Marshal(u.Object)
	if err != nil {
		return nil, false, err
	}
	opts := jsonpatch.NewApplyOptions()
	opts.AllowMissingPathOnRemove = true
	for _, p := range patches {
		// A path that is not there (on this side, or at all) is skipped.
		if out, err := p.ApplyWithOptions(doc, opts); err == nil {
			doc = out
		}
	}
	out := &unstructured.Unstructured{}
	if err := out.UnmarshalJSON(doc); err != nil {
		return nil, false, fmt.Errorf("after diff.comparePatches: %w", err)
	}
	return out, true, nil
}

// glob matches s against a shell pattern ("*" for any); the pattern was
// checked by New.
func glob(pattern, s string) bool {
	ok, _ := path.Match(pattern, s)
	return ok
}
