package renderer

import (
	"strings"
	"text/template/parse"

	"sigs.k8s.io/yaml"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

// maxAnalysedTemplate bounds the template text the controller parses to
// learn what it reads; larger templates count as reading everything (the
// render worker still renders them, within its limits).
const maxAnalysedTemplate = 256 << 10

// Reads is what of the template context a Bundle's values read for a
// cluster. The controller sends a render only that part (ClusterContext.Only),
// so clusters the templates cannot tell apart share one render: a template
// reading one label with three values renders three times, whatever the
// number of clusters.
type Reads struct {
	// All: the templates may read anything (they use the whole context,
	// or could not be analysed).
	All bool
	// Templated: there is something to template at all.
	Templated bool

	Name, Namespace             bool
	Labels, Annotations, Values keyReads
}

// keyReads is what a template reads of one map of the context.
type keyReads struct {
	all  bool
	keys map[string]bool
}

func (k *keyReads) add(key string) {
	if k.keys == nil {
		k.keys = map[string]bool{}
	}
	k.keys[key] = true
}

// TemplateReads parses (never executes) the `${ }` templates and the
// label references of a Bundle's merged options and returns what they read.
// It runs in the controller: the templates only execute in render workers.
func TemplateReads(opts fleet.BundleDeploymentOptions) Reads {
	var r Reads
	h := opts.Helm
	if h == nil {
		return r
	}
	var values map[string]any
	if h.Values != nil {
		values = h.Values.Data
	}
	r.labelRefs(values, 0)
	if h.DisablePreProcess {
		return r
	}
	var texts []string
	if len(values) > 0 {
		text, err := yaml.Marshal(values)
		if err != nil {
			r.All, r.Templated = true, true
			return r
		}
		if strings.Contains(string(text), "${") {
			texts = append(texts, string(text))
		}
	}
	for _, k := range sortedKeys(h.TemplateValues) {
		texts = append(texts, h.TemplateValues[k])
	}
	for _, text := range texts {
		r.Templated = true
		if len(text) > maxAnalysedTemplate {
			r.All = true
			return r
		}
		t, err := newValuesTemplate(text)
		if err != nil {
			// The render reports the error, the same for every cluster:
			// the templates read nothing.
			continue
		}
		for _, tt := range t.Templates() {
			if tt.Tree != nil && tt.Tree.Root != nil {
				r.walk(tt.Tree.Root, true)
			}
		}
	}
	return r
}

// labelRefs records the labels that "global.fleet.clusterLabels.<key>"
// values name.
func (r *Reads) labelRefs(v any, depth int) {
	if depth > maxValuesDepth+1 {
		return
	}
	switch v := v.(type) {
	case string:
		if label, ok := strings.CutPrefix(v, ClusterLabelPrefix); ok {
			r.Templated = true
			r.Labels.add(label)
		}
	case map[string]any:
		for _, item := range v {
			r.labelRefs(item, depth+1)
		}
	case []any:
		for _, item := range v {
			r.labelRefs(item, depth+1)
		}
	}
}

// walk records what a node reads. root says whether dot is the context
// itself there: inside the body of with and range, dot is a value derived
// from what their pipeline read (recorded already), so nothing new is read
// through it. Variables other than $ hold derived values too.
func (r *Reads) walk(n parse.Node, root bool) {
	switch n := n.(type) {
	case nil:
	case *parse.ListNode:
		if n == nil {
			return
		}
		for _, c := range n.Nodes {
			r.walk(c, root)
		}
	case *parse.ActionNode:
		r.walk(n.Pipe, root)
	case *parse.PipeNode:
		if n == nil {
			return
		}
		for _, c := range n.Cmds {
			r.walk(c, root)
		}
	case *parse.CommandNode:
		for _, a := range n.Args {
			r.walk(a, root)
		}
	case *parse.IfNode:
		r.walk(n.Pipe, root)
		r.walk(n.List, root)
		r.walk(n.ElseList, root)
	case *parse.WithNode:
		r.walk(n.Pipe, root)
		r.walk(n.List, false)
		r.walk(n.ElseList, root) // else: dot unchanged
	case *parse.RangeNode:
		r.walk(n.Pipe, root)
		r.walk(n.List, false)
		r.walk(n.ElseList, root)
	case *parse.TemplateNode:
		r.walk(n.Pipe, root)
	case *parse.DotNode:
		if root {
			r.All = true
		}
	case *parse.FieldNode:
		if root {
			r.path(n.Ident)
		}
	case *parse.VariableNode:
		if n.Ident[0] == "$" {
			r.path(n.Ident[1:])
		}
	case *parse.ChainNode:
		switch base := n.Node.(type) {
		case *parse.DotNode:
			if root {
				r.path(n.Field)
			}
		case *parse.VariableNode:
			if base.Ident[0] == "$" {
				r.path(append(append([]string{}, base.Ident[1:]...), n.Field...))
			}
		default:
			r.walk(n.Node, root)
		}
	}
}

// path records a read of the context at path (empty: all of it).
func (r *Reads) path(p []string) {
	if len(p) == 0 {
		r.All = true
		return
	}
	var m *keyReads
	switch p[0] {
	case "ClusterName":
		r.Name = true
		return
	case "ClusterNamespace":
		r.Namespace = true
		return
	case "ClusterLabels":
		m = &r.Labels
	case "ClusterAnnotations":
		m = &r.Annotations
	case "ClusterValues":
		m = &r.Values
	default:
		return // no such field: the render fails alike for every cluster
	}
	if len(p) == 1 {
		m.all = true
		return
	}
	m.add(p[1])
}

// Only returns the part of the context r reads: every cluster that gives the
// same part renders the same values. Nil when nothing is templated.
func (c *ClusterContext) Only(r Reads) *ClusterContext {
	if c == nil || !r.Templated {
		return nil
	}
	if r.All {
		return c
	}
	out := &ClusterContext{}
	if r.Name {
		out.Name = c.Name
	}
	if r.Namespace {
		out.Namespace = c.Namespace
	}
	out.Labels = onlyKeys(c.Labels, r.Labels)
	out.Annotations = onlyKeys(c.Annotations, r.Annotations)
	out.Values = onlyKeys(c.Values, r.Values)
	return out
}

func onlyKeys[V any](m map[string]V, k keyReads) map[string]V {
	if k.all {
		return m
	}
	var out map[string]V
	for key := range k.keys {
		if v, ok := m[key]; ok {
			if out == nil {
				out = map[string]V{}
			}
			out[key] = v
		}
	}
	return out
}
