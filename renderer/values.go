package renderer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig/v3"
	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	"sigs.k8s.io/yaml"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

// Helm values as Fleet computes them per target cluster: `${ }` templates
// over the cluster (helm.values and helm.templateValues), Fleet's older
// `global.fleet.clusterLabels.<key>` substitution, and helm.valuesFrom. The
// templates are the Bundle author's code: they run where the rest of it
// runs, in a render worker (ResolveValues), never in the controller, which
// only parses them to learn what they read (TemplateReads).

// ClusterLabelPrefix starts a values string that Fleet replaces with the
// value of the cluster label named by the rest of the string.
const ClusterLabelPrefix = "global.fleet.clusterLabels."

// maxValuesDepth bounds how deep label substitution walks nested values, as
// Fleet does.
const maxValuesDepth = 50

// ClusterContext is what the templates of a Bundle's values read of its
// target cluster: .ClusterName, .ClusterNamespace, .ClusterLabels,
// .ClusterAnnotations and .ClusterValues (the Cluster's
// spec.templateValues). The controller sends only the part the templates
// read (Only), so clusters that look the same to them share one render.
type ClusterContext struct {
	Name        string            `json:"name,omitempty"`
	Namespace   string            `json:"namespace,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Values      map[string]any    `json:"values,omitempty"`
}

// ContextOf is the whole template context of a Cluster, as Fleet builds it:
// labels and annotations without kubectl's (kubectl.kubernetes.io/) and
// Rancher's (any key containing cattle.io/), except that labels under
// fleet.cattle.io/ and management.cattle.io/ stay.
func ContextOf(c *fleet.Cluster) *ClusterContext {
	ctx := &ClusterContext{Name: c.Name, Namespace: c.Namespace, Labels: map[string]string{}, Annotations: map[string]string{}, Values: map[string]any{}}
	for k, v := range c.Labels {
		if exported(k) || strings.HasPrefix(k, "fleet.cattle.io/") || strings.HasPrefix(k, "management.cattle.io/") {
			ctx.Labels[k] = v
		}
	}
	for k, v := range c.Annotations {
		if exported(k) {
			ctx.Annotations[k] = v
		}
	}
	if c.Spec.TemplateValues != nil && c.Spec.TemplateValues.Data != nil {
		ctx.Values = c.Spec.TemplateValues.Data // data() copies it
	}
	return ctx
}

func exported(key string) bool {
	return !strings.HasPrefix(key, "kubectl.kubernetes.io/") && !strings.Contains(key, "cattle.io/")
}

// data is the template data: the names Fleet's templates use.
func (c *ClusterContext) data() map[string]any {
	labels := make(map[string]any, len(c.Labels))
	for k, v := range c.Labels {
		labels[k] = v
	}
	annotations := make(map[string]any, len(c.Annotations))
	for k, v := range c.Annotations {
		annotations[k] = v
	}
	// A copy: sprig's set and unset change the dicts they are given.
	values := map[string]any{}
	if data, err := json.Marshal(c.Values); err == nil {
		_ = json.Unmarshal(data, &values)
	}
	return map[string]any{
		"ClusterName":        c.Name,
		"ClusterNamespace":   c.Namespace,
		"ClusterLabels":      labels,
		"ClusterAnnotations": annotations,
		"ClusterValues":      values,
	}
}

// ValuesSource is the content of one helm.valuesFrom reference, read
// upstream by the controller: a YAML map of values.
type ValuesSource struct {
	// Kind is ConfigMap or Secret; Namespace, Name and Key say where the
	// data was read. A Secret's content is never quoted in an error.
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Key       string `json:"key"`
	Data      []byte `json:"data"`
}

func (s ValuesSource) String() string {
	return fmt.Sprintf("helm.valuesFrom: %s %s/%s key %s", s.Kind, s.Namespace, s.Name, s.Key)
}

// ClusterValues are the per-cluster inputs of a Bundle's values: the
// template context (nil: no cluster, nothing is templated) and the
// valuesFrom content, in the order of helm.valuesFrom.
type ClusterValues struct {
	Cluster    *ClusterContext `json:"cluster,omitempty"`
	ValuesFrom []ValuesSource  `json:"valuesFrom,omitempty"`
}

// ValuesError is a Bundle's values that cannot be computed for a cluster:
// Path is the value at fault (helm.values.<path>, helm.templateValues.<key>,
// helm.valuesFrom...).
type ValuesError struct {
	Path   string
	Err    error
	reason string
}

func (e *ValuesError) Error() string {
	if e.Path == "" {
		return e.Err.Error()
	}
	return e.Path + ": " + e.Err.Error()
}

func (e *ValuesError) Unwrap() error { return e.Err }

// Reason is the Bundle condition reason: ValuesTemplateFailed or
// ValuesFromInvalid.
func (e *ValuesError) Reason() string { return e.reason }

// ResolveValues computes the Helm values a Bundle renders with for one
// cluster, in Fleet's order: label substitution in helm.values, then (unless
// disablePreProcess) helm.values as a `${ }` template, helm.templateValues
// rendered and set as top-level values, then each valuesFrom source merged
// over the result (Fleet merges them over the values downstream). The
// options it returns carry the result in helm.values, and neither
// templateValues nor valuesFrom: RenderFiles lays helm.values over the
// values files as before. Without a cluster nothing is templated.
func ResolveValues(opts fleet.BundleDeploymentOptions, in ClusterValues) (fleet.BundleDeploymentOptions, error) {
	h := opts.Helm
	if h == nil || (in.Cluster == nil && len(in.ValuesFrom) == 0 && len(ValuesFromRefs(h, "")) == 0) {
		return opts, nil
	}
	out := *opts.DeepCopy()
	h = out.Helm
	var values map[string]any
	if h.Values != nil && h.Values.Data != nil {
		values = h.Values.Data
	}
	if in.Cluster != nil {
		if values == nil && len(h.TemplateValues) > 0 {
			values = map[string]any{}
		}
		if err := substituteLabels(values, in.Cluster.Labels, "helm.values", 0); err != nil {
			return opts, err
		}
		if !h.DisablePreProcess {
			data := in.Cluster.data()
			var err error
			if values, err = templateValues(values, data); err != nil {
				return opts, err
			}
			keys := sortedKeys(h.TemplateValues)
			for _, k := range keys {
				v, err := templateValue(h.TemplateValues[k], data)
				if err != nil {
					return opts, &ValuesError{Path: "helm.templateValues." + k, Err: err, reason: fleet.ValuesTemplateFailedReason}
				}
				values[k] = v
			}
		}
		h.TemplateValues = nil
	}
	if want := len(ValuesFromRefs(h, "")); want != len(in.ValuesFrom) {
		return opts, &ValuesError{Path: "helm.valuesFrom", reason: fleet.ValuesFromInvalidReason,
			Err: fmt.Errorf("%d sources referenced, %d read: valuesFrom is read from the upstream cluster (by the controller, or by `fleet render bundle --kubeconfig`)", want, len(in.ValuesFrom))}
	}
	for _, src := range in.ValuesFrom {
		v, err := parseSource(src)
		if err != nil {
			return opts, err
		}
		if values == nil {
			values = map[string]any{}
		}
		values = chartutil.MergeTables(v, values)
	}
	h.ValuesFrom = nil
	if values != nil {
		h.Values = &fleet.GenericMap{Data: values}
	}
	return out, nil
}

// lineNumber finds "line N" in a YAML error: the one part of it that never
// quotes the document.
var lineNumber = regexp.MustCompile(`line \d+`)

func parseSource(src ValuesSource) (map[string]any, error) {
	var v map[string]any
	if err := yaml.Unmarshal(src.Data, &v); err != nil {
		msg := "is not a YAML map of Helm values"
		if src.Kind == "Secret" {
			// YAML errors can quote the content: say only where.
			if l := lineNumber.FindString(err.Error()); l != "" {
				msg += " (" + l + ")"
			}
			return nil, &ValuesError{Path: src.String(), Err: errors.New(msg), reason: fleet.ValuesFromInvalidReason}
		}
		return nil, &ValuesError{Path: src.String(), Err: fmt.Errorf("%s: %v", msg, err), reason: fleet.ValuesFromInvalidReason}
	}
	return v, nil
}

// substituteLabels replaces every string value "global.fleet.clusterLabels.<key>"
// (in maps, and in maps inside lists) with the label's value, or "" when the
// cluster has no such label, as Fleet does.
func substituteLabels(values map[string]any, labels map[string]string, path string, depth int) error {
	if depth > maxValuesDepth {
		return &ValuesError{Path: path, Err: fmt.Errorf("values nested deeper than %d levels: cluster label substitution stops there", maxValuesDepth), reason: fleet.ValuesTemplateFailedReason}
	}
	for k, v := range values {
		switch v := v.(type) {
		case string:
			if label, ok := strings.CutPrefix(v, ClusterLabelPrefix); ok {
				values[k] = labels[label]
			}
		case map[string]any:
			if err := substituteLabels(v, labels, path+"."+k, depth+1); err != nil {
				return err
			}
		case []any:
			for i, item := range v {
				if m, ok := item.(map[string]any); ok {
					if err := substituteLabels(m, labels, fmt.Sprintf("%s.%s[%d]", path, k, i), depth+1); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

// FuncMap is the functions `${ }` templates have: sprig's, without those
// that reach outside the render (env and expandenv read the process
// environment, getHostByName resolves DNS) and, as in Fleet, without
// include and tpl.
func FuncMap() template.FuncMap {
	f := sprig.TxtFuncMap()
	for _, name := range RemovedFuncs {
		delete(f, name)
	}
	return f
}

// RemovedFuncs are the sprig functions templates of values do not get.
var RemovedFuncs = []string{"env", "expandenv", "getHostByName", "include", "tpl"}

// newValuesTemplate parses text as Fleet does: `${ }` delimiters (YAML
// gives `{ }` a meaning), a missing key is an error.
func newValuesTemplate(text string) (*template.Template, error) {
	return template.New("values").Funcs(FuncMap()).Option("missingkey=error").Delims("${", "}").Parse(text)
}

// templateValues renders the values, written out as YAML, as one template
// (what Fleet does: a template may write YAML structure) and reads the
// result back. On failure it finds the value at fault by rendering each
// string value alone.
func templateValues(values map[string]any, data map[string]any) (map[string]any, error) {
	if len(values) == 0 {
		return values, nil
	}
	text, err := yaml.Marshal(values)
	if err != nil {
		return nil, &ValuesError{Path: "helm.values", Err: errors.New("cannot be written as YAML"), reason: fleet.ValuesTemplateFailedReason}
	}
	if !bytes.Contains(text, []byte("${")) {
		return values, nil
	}
	out, err := execute(string(text), data)
	if err != nil {
		path, cause := valueAtFault(values, data, "helm.values")
		if cause == nil {
			path, cause = "helm.values", err
		}
		return nil, &ValuesError{Path: path, Err: cause, reason: fleet.ValuesTemplateFailedReason}
	}
	var result map[string]any
	if err := yaml.Unmarshal([]byte(out), &result); err != nil {
		return nil, &ValuesError{Path: "helm.values", Err: fmt.Errorf("the templated values are not YAML: %v", err), reason: fleet.ValuesTemplateFailedReason}
	}
	if result == nil {
		result = map[string]any{}
	}
	return result, nil
}

// templateValue renders one helm.templateValues entry and reads it as YAML.
func templateValue(text string, data map[string]any) (any, error) {
	out, err := execute(text, data)
	if err != nil {
		return nil, err
	}
	var v any
	if err := yaml.Unmarshal([]byte(out), &v); err != nil {
		return nil, fmt.Errorf("the templated value is not YAML: %v", err)
	}
	return v, nil
}

func execute(text string, data map[string]any) (string, error) {
	t, err := newValuesTemplate(text)
	if err != nil {
		return "", fmt.Errorf("parsing the template: %w", err)
	}
	var b bytes.Buffer
	if err := t.Execute(&b, data); err != nil {
		return "", fmt.Errorf("executing the template: %w", err)
	}
	return b.String(), nil
}

// valueAtFault returns the path of the first string value (in key order)
// that fails to render alone, and its error; nil when none does.
func valueAtFault(v any, data map[string]any, path string) (string, error) {
	switch v := v.(type) {
	case string:
		if strings.Contains(v, "${") {
			if _, err := execute(v, data); err != nil {
				return path, err
			}
		}
	case map[string]any:
		for _, k := range sortedKeys(v) {
			if p, err := valueAtFault(v[k], data, path+"."+k); err != nil {
				return p, err
			}
		}
	case []any:
		for i, item := range v {
			if p, err := valueAtFault(item, data, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return p, err
			}
		}
	}
	return "", nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// ValuesFromRef is one ConfigMap or Secret key helm.valuesFrom reads.
type ValuesFromRef struct {
	Kind, Namespace, Name, Key string
}

// DefaultValuesKey is the key a valuesFrom reference reads when it names
// none.
const DefaultValuesKey = "values.yaml"

// ValuesFromRefs lists what helm.valuesFrom reads, in merge order: per
// entry its ConfigMap, then its Secret (Fleet merges the Secret last). An
// empty namespace is the Bundle's (namespace); an empty key values.yaml.
func ValuesFromRefs(h *fleet.HelmOptions, namespace string) []ValuesFromRef {
	if h == nil {
		return nil
	}
	var refs []ValuesFromRef
	add := func(kind, ns, name, key string) {
		if ns == "" {
			ns = namespace
		}
		if key == "" {
			key = DefaultValuesKey
		}
		refs = append(refs, ValuesFromRef{Kind: kind, Namespace: ns, Name: name, Key: key})
	}
	for _, v := range h.ValuesFrom {
		if r := v.ConfigMapKeyRef; r != nil {
			add("ConfigMap", r.Namespace, r.Name, r.Key)
		}
		if r := v.SecretKeyRef; r != nil {
			add("Secret", r.Namespace, r.Name, r.Key)
		}
	}
	return refs
}
