package renderer

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

// valuesChart prints its values, so a test sees what the chart got.
var valuesChart = map[string][]byte{
	"chart/Chart.yaml":          []byte("apiVersion: v2\nname: show\nversion: 0.1.0\n"),
	"chart/templates/show.yaml": []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: show\ndata:\n  values: {{ toJson .Values | quote }}\n"),
}

// renderedValues renders valuesChart (plus files) with opts for one
// cluster's values inputs, as the worker does, and returns the chart's values.
func renderedValues(t *testing.T, files map[string][]byte, opts fleet.BundleDeploymentOptions, in ClusterValues) (map[string]any, error) {
	t.Helper()
	all := map[string][]byte{}
	for k, v := range valuesChart {
		all[k] = v
	}
	for k, v := range files {
		all[k] = v
	}
	resolved, err := ResolveValues(opts, in)
	if err != nil {
		return nil, err
	}
	out, err := RenderFiles("show", all, resolved)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := out.Objects()
	if err != nil {
		t.Fatal(err)
	}
	data, _, _ := unstructuredString(objs[0].Object, "data", "values")
	var v map[string]any
	if err := yaml.Unmarshal([]byte(data), &v); err != nil {
		t.Fatal(err)
	}
	return v, nil
}

func unstructuredString(obj map[string]any, fields ...string) (string, bool, error) {
	var cur any = obj
	for _, f := range fields {
		m, ok := cur.(map[string]any)
		if !ok {
			return "", false, nil
		}
		cur = m[f]
	}
	s, ok := cur.(string)
	return s, ok, nil
}

func helmValues(yml string) *fleet.GenericMap {
	m := map[string]any{}
	if err := yaml.Unmarshal([]byte(yml), &m); err != nil {
		panic(err)
	}
	return &fleet.GenericMap{Data: m}
}

func prodCluster() *fleet.Cluster {
	return &fleet.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: "fleet-default", Name: "prod-eu-1",
			Labels: map[string]string{"env": "prod", "kubectl.kubernetes.io/x": "hidden", "cattle.io/hidden": "x",
				"management.cattle.io/cluster-name": "c-1", "fleet.cattle.io/cluster": "prod-eu-1"},
			Annotations: map[string]string{"region": "eu-west", "field.cattle.io/creator": "hidden"}},
		Spec: fleet.ClusterSpec{TemplateValues: helmValues("replicas: 3\nzones: [a, b]\n\"off\": ''\n")},
	}
}

// TestResolveValues_TemplatesWithTheCluster: every name Fleet's templates
// read gives the cluster's value, templates may write YAML structure,
// templateValues set top-level values, global.fleet.clusterLabels.<key>
// values are replaced, all as Fleet computes them.
func TestResolveValues_TemplatesWithTheCluster(t *testing.T) {
	opts := fleet.BundleDeploymentOptions{Helm: &fleet.HelmOptions{Chart: "chart",
		Values: helmValues(`
name: ${ .ClusterName }
ns: ${ .ClusterNamespace }
env: ${ .ClusterLabels.env }
region: ${ .ClusterAnnotations.region }
replicas: ${ .ClusterValues.replicas }
zones: ${ .ClusterValues.zones | toJson }
exported: ${ keys .ClusterLabels | sortAlpha | join "," }
mgmt: ${ index .ClusterLabels "management.cattle.io/cluster-name" }
missing: ${ get .ClusterLabels "nope" | default "none" }
legacy:
  env: global.fleet.clusterLabels.env
  absent: global.fleet.clusterLabels.absent
  list: [{env: global.fleet.clusterLabels.env}]
literal: "{{ .Values.kept }}"
`),
		TemplateValues: map[string]string{"fromTemplateValues": "${ .ClusterLabels.env }-${ .ClusterValues.replicas }", "structured": "a: ${ .ClusterValues.replicas }"},
	}}
	got, err := renderedValues(t, nil, opts, ClusterValues{Cluster: ContextOf(prodCluster())})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"name": "prod-eu-1", "ns": "fleet-default", "env": "prod", "region": "eu-west",
		"replicas": float64(3), "zones": []any{"a", "b"},
		"exported": "env,fleet.cattle.io/cluster,management.cattle.io/cluster-name",
		"mgmt":     "c-1", "missing": "none",
		"legacy":             map[string]any{"env": "prod", "absent": "", "list": []any{map[string]any{"env": "prod"}}},
		"literal":            "{{ .Values.kept }}",
		"fromTemplateValues": "prod-3", "structured": map[string]any{"a": float64(3)},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("values (-want +got):\n%s", diff)
	}
}

// TestResolveValues_DisablePreProcessKeepsTemplates: disablePreProcess
// leaves `${ }` as written (and drops templateValues); Fleet's label
// substitution still applies, as in Fleet.
func TestResolveValues_DisablePreProcessKeepsTemplates(t *testing.T) {
	opts := fleet.BundleDeploymentOptions{Helm: &fleet.HelmOptions{Chart: "chart", DisablePreProcess: true,
		Values:         helmValues("a: ${ .ClusterName }\nb: global.fleet.clusterLabels.env\n"),
		TemplateValues: map[string]string{"c": "${ .ClusterName }"}}}
	got, err := renderedValues(t, nil, opts, ClusterValues{Cluster: ContextOf(prodCluster())})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]any{"a": "${ .ClusterName }", "b": "prod"}, got); diff != "" {
		t.Errorf("values (-want +got):\n%s", diff)
	}
}

// TestResolveValues_MergeOrderIsFleets: valuesFiles, then values (with
// templates), then templateValues, then each valuesFrom source in order
// (per entry its ConfigMap, then its Secret) over the result: Fleet merges
// valuesFrom over the values downstream.
func TestResolveValues_MergeOrderIsFleets(t *testing.T) {
	files := map[string][]byte{"values/base.yaml": []byte("a: file\nb: file\nc: file\nd: file\ne: file\nnested: {p: file, q: file}\n")}
	opts := fleet.BundleDeploymentOptions{Helm: &fleet.HelmOptions{Chart: "chart", ValuesFiles: []string{"values/base.yaml"},
		Values:         helmValues("b: values\nc: values\nd: values\ne: values\nnested: {q: values}\n"),
		TemplateValues: map[string]string{"c": "templateValues", "d": "templateValues", "e": "templateValues"},
		ValuesFrom: []fleet.ValuesFrom{
			{ConfigMapKeyRef: &fleet.ConfigMapKeySelector{LocalObjectReference: fleet.LocalObjectReference{Name: "cm"}},
				SecretKeyRef: &fleet.SecretKeySelector{LocalObjectReference: fleet.LocalObjectReference{Name: "s"}}},
		}}}
	in := ClusterValues{Cluster: ContextOf(prodCluster()), ValuesFrom: []ValuesSource{
		{Kind: "ConfigMap", Namespace: "fleet-default", Name: "cm", Key: DefaultValuesKey, Data: []byte("d: configmap\ne: configmap\n")},
		{Kind: "Secret", Namespace: "fleet-default", Name: "s", Key: DefaultValuesKey, Data: []byte("e: secret\nnested: {r: secret}\n")},
	}}
	got, err := renderedValues(t, files, opts, in)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"a": "file", "b": "values", "c": "templateValues", "d": "configmap", "e": "secret",
		"nested": map[string]any{"p": "file", "q": "values", "r": "secret"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("values (-want +got):\n%s", diff)
	}
	if refs := ValuesFromRefs(opts.Helm, "fleet-default"); len(refs) != 2 || refs[0].Kind != "ConfigMap" || refs[1].Kind != "Secret" || refs[1].Key != "values.yaml" || refs[1].Namespace != "fleet-default" {
		t.Errorf("refs %+v: want the ConfigMap, then the Secret, key values.yaml, in the Bundle's namespace", refs)
	}
}

// TestResolveValues_ErrorsNameThePathAndSayWhatToFix: a template that
// fails for a cluster names the value, and the message says why; it is the
// Bundle's failure (reason ValuesTemplateFailed), never a panic.
func TestResolveValues_ErrorsNameThePathAndSayWhatToFix(t *testing.T) {
	cluster := ClusterValues{Cluster: ContextOf(prodCluster())}
	cases := []struct {
		name      string
		helm      fleet.HelmOptions
		in        ClusterValues
		reason    string
		msg       []string
		forbidden string
	}{
		{"a label the cluster lacks", fleet.HelmOptions{Values: helmValues("ok: ${ .ClusterName }\nserver:\n  zone: ${ .ClusterLabels.zone }\n")}, cluster,
			fleet.ValuesTemplateFailedReason, []string{"helm.values.server.zone", `map has no entry for key "zone"`}, ""},
		{"a template that does not parse", fleet.HelmOptions{Values: helmValues("a: {b: '${ .ClusterName '}\n")}, cluster,
			fleet.ValuesTemplateFailedReason, []string{"helm.values.a.b", "parsing the template"}, ""},
		{"a templateValues entry", fleet.HelmOptions{TemplateValues: map[string]string{"x": "${ .ClusterValues.nope }"}}, cluster,
			fleet.ValuesTemplateFailedReason, []string{"helm.templateValues.x", `no entry for key "nope"`}, ""},
		{"a Secret that is not YAML", fleet.HelmOptions{ValuesFrom: []fleet.ValuesFrom{{SecretKeyRef: &fleet.SecretKeySelector{LocalObjectReference: fleet.LocalObjectReference{Name: "s"}}}}},
			ClusterValues{ValuesFrom: []ValuesSource{{Kind: "Secret", Namespace: "ws", Name: "s", Key: "values.yaml", Data: []byte("password: hunter2\n- oops: hunter2\n")}}},
			fleet.ValuesFromInvalidReason, []string{"Secret ws/s key values.yaml", "not a YAML map", "line"}, "hunter2"},
		{"a Secret of a scalar", fleet.HelmOptions{ValuesFrom: []fleet.ValuesFrom{{SecretKeyRef: &fleet.SecretKeySelector{LocalObjectReference: fleet.LocalObjectReference{Name: "s"}}}}},
			ClusterValues{ValuesFrom: []ValuesSource{{Kind: "Secret", Namespace: "ws", Name: "s", Key: "values.yaml", Data: []byte("hunter2")}}},
			fleet.ValuesFromInvalidReason, []string{"not a YAML map"}, "hunter2"},
		{"valuesFrom not read", fleet.HelmOptions{ValuesFrom: []fleet.ValuesFrom{{SecretKeyRef: &fleet.SecretKeySelector{LocalObjectReference: fleet.LocalObjectReference{Name: "s"}}}}},
			ClusterValues{}, fleet.ValuesFromInvalidReason, []string{"read from the upstream"}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.helm
			h.Chart = "chart"
			_, err := ResolveValues(fleet.BundleDeploymentOptions{Helm: &h}, tc.in)
			var ve *ValuesError
			if !errors.As(err, &ve) {
				t.Fatalf("got %v, want a *ValuesError", err)
			}
			if ReasonOf(err) != tc.reason {
				t.Errorf("reason %s, want %s", ReasonOf(err), tc.reason)
			}
			for _, m := range tc.msg {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("%q does not say %q", err, m)
				}
			}
			if tc.forbidden != "" && strings.Contains(err.Error(), tc.forbidden) {
				t.Errorf("%q quotes the Secret's content", err)
			}
		})
	}
}

// TestFuncMap_NothingReachesOutsideTheRender: the functions that read the
// process environment or resolve DNS are not there: a template using them
// does not even parse, so nothing of the renderer's environment can reach
// a Bundle's values.
func TestFuncMap_NothingReachesOutsideTheRender(t *testing.T) {
	t.Setenv("FLEET_TEST_SECRET", "s3cr3t")
	for _, tmpl := range []string{
		`${ env "FLEET_TEST_SECRET" }`,
		`${ expandenv "$FLEET_TEST_SECRET" }`,
		`${ getHostByName "example.com" }`,
		`${ include "x" . }`,
		`${ tpl "x" . }`,
	} {
		opts := fleet.BundleDeploymentOptions{Helm: &fleet.HelmOptions{Chart: "chart", Values: helmValues(fmt.Sprintf("v: '%s'\n", tmpl))}}
		_, err := ResolveValues(opts, ClusterValues{Cluster: ContextOf(prodCluster())})
		if err == nil || !strings.Contains(err.Error(), "not defined") || strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("%s: got %v, want a parse error: function not defined", tmpl, err)
		}
	}
	for _, name := range RemovedFuncs {
		if _, ok := FuncMap()[name]; ok {
			t.Errorf("FuncMap has %s", name)
		}
	}
}

// TestTemplateReads_OnlyWhatTheTemplatesRead: the part of a cluster sent to
// a render renders exactly what the whole cluster renders, for templates
// that read in every way text/template allows; and it is no more than they
// read, so clusters differing elsewhere share it.
func TestTemplateReads_OnlyWhatTheTemplatesRead(t *testing.T) {
	cases := []struct {
		name, values string
		templateVals map[string]string
		sameFor      []func(*fleet.Cluster) // changes the templates cannot see
		differentFor []func(*fleet.Cluster) // changes they see
	}{
		{name: "one label", values: "env: ${ .ClusterLabels.env }",
			sameFor:      []func(*fleet.Cluster){rename, setLabel("team", "x"), setAnnotation("region", "us"), setValue("replicas", 1)},
			differentFor: []func(*fleet.Cluster){setLabel("env", "dev")}},
		{name: "label substitution", values: "env: global.fleet.clusterLabels.env",
			sameFor: []func(*fleet.Cluster){rename, setLabel("team", "x")}, differentFor: []func(*fleet.Cluster){setLabel("env", "dev")}},
		{name: "name", values: "n: ${ .ClusterName }", differentFor: []func(*fleet.Cluster){rename}, sameFor: []func(*fleet.Cluster){setLabel("env", "dev")}},
		{name: "a whole map through a function", values: "n: '${ get .ClusterLabels \"env\" }'",
			differentFor: []func(*fleet.Cluster){setLabel("env", "dev"), setLabel("team", "x")}, sameFor: []func(*fleet.Cluster){rename, setValue("replicas", 1)}},
		{name: "with and range see derived values", values: "a: '${ with .ClusterValues.zones }${ range . }${ . }${ end }${ end }'\nb: '${ with .ClusterValues.off }${ .ClusterName }${ else }${ .ClusterAnnotations.region }${ end }'",
			differentFor: []func(*fleet.Cluster){setValue("zones", []any{"c"}), setAnnotation("region", "us")},
			sameFor:      []func(*fleet.Cluster){rename, setLabel("env", "dev"), setValue("replicas", 1)}},
		{name: "root variable", values: "a: '${ $.ClusterLabels.env }'\nb: '${ $x := $ }${ $x.ClusterName }'",
			differentFor: []func(*fleet.Cluster){setLabel("env", "dev"), rename}},
		{name: "templateValues", templateVals: map[string]string{"r": "${ .ClusterValues.replicas }"},
			differentFor: []func(*fleet.Cluster){setValue("replicas", 1)}, sameFor: []func(*fleet.Cluster){rename, setLabel("env", "dev")}},
		{name: "define and template", values: "a: '${ define \"t\" }${ .ClusterLabels.env }${ end }${ template \"t\" . }'",
			differentFor: []func(*fleet.Cluster){setLabel("env", "dev")}},
		{name: "nothing templated", values: "a: b", sameFor: []func(*fleet.Cluster){rename, setLabel("env", "dev")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			opts := fleet.BundleDeploymentOptions{Helm: &fleet.HelmOptions{Chart: "chart", Values: helmValues(tc.values), TemplateValues: tc.templateVals}}
			reads := TemplateReads(opts)
			render := func(c *fleet.Cluster, ctx *ClusterContext) string {
				o, err := ResolveValues(opts, ClusterValues{Cluster: ctx})
				if err != nil {
					t.Fatalf("%s: %v", c.Name, err)
				}
				data, _ := yaml.Marshal(o.Helm.Values)
				return string(data)
			}
			base := prodCluster()
			baseWhole, basePart := render(base, ContextOf(base)), ContextOf(base).Only(reads)
			if got := render(base, basePart); got != baseWhole {
				t.Fatalf("the part renders\n%s\nthe whole cluster\n%s", got, baseWhole)
			}
			key := func(c *ClusterContext) string { data, _ := yaml.Marshal(c); return string(data) }
			for i, change := range append(tc.sameFor, tc.differentFor...) {
				c := prodCluster()
				change(c)
				part := ContextOf(c).Only(reads)
				if got, whole := render(c, part), render(c, ContextOf(c)); got != whole {
					t.Errorf("change %d: the part renders\n%s\nthe whole cluster\n%s", i, got, whole)
				}
				if same := key(part) == key(basePart); same != (i < len(tc.sameFor)) {
					t.Errorf("change %d: shares the base cluster's render: %v, want %v (part %s)", i, same, i < len(tc.sameFor), key(part))
				}
			}
		})
	}
}

// TestTemplateReads_1000ClustersOneLabelThreeValuesRenderThreeTimes is the
// cost measurement: a template reading one label with three values on 1,000
// otherwise different clusters gives three distinct render inputs.
func TestTemplateReads_1000ClustersOneLabelThreeValuesRenderThreeTimes(t *testing.T) {
	opts := fleet.BundleDeploymentOptions{Helm: &fleet.HelmOptions{Chart: "chart", Values: helmValues("tier: ${ .ClusterLabels.tier }\nreplicas: 2\n")}}
	reads := TemplateReads(opts)
	distinct := map[string]bool{}
	for i := range 1000 {
		c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ws", Name: fmt.Sprintf("c-%04d", i),
			Labels:      map[string]string{"tier": []string{"gold", "silver", "bronze"}[i%3], "id": fmt.Sprint(i)},
			Annotations: map[string]string{"created": fmt.Sprint(i)}}}
		data, err := yaml.Marshal(ContextOf(c).Only(reads))
		if err != nil {
			t.Fatal(err)
		}
		distinct[string(data)] = true
	}
	if len(distinct) != 3 {
		t.Errorf("%d distinct renders for 1,000 clusters, want 3", len(distinct))
	}
	t.Logf("1,000 clusters, a template reading one label with 3 values: %d renders", len(distinct))
}

func rename(c *fleet.Cluster) { c.Name = "other" }
func setLabel(k, v string) func(*fleet.Cluster) {
	return func(c *fleet.Cluster) { c.Labels[k] = v }
}
func setAnnotation(k, v string) func(*fleet.Cluster) {
	return func(c *fleet.Cluster) { c.Annotations[k] = v }
}
func setValue(k string, v any) func(*fleet.Cluster) {
	return func(c *fleet.Cluster) { c.Spec.TemplateValues.Data[k] = v }
}

// TestRenderFiles_SkipSchemaValidation: values the chart's
// values.schema.json refuses fail the render, unless
// helm.skipSchemaValidation is set, as in Fleet (Helm's option).
func TestRenderFiles_SkipSchemaValidation(t *testing.T) {
	files := map[string][]byte{"chart/values.schema.json": []byte(`{"type":"object","properties":{"replicas":{"type":"integer"}}}`)}
	for k, v := range valuesChart {
		files[k] = v
	}
	opts := fleet.BundleDeploymentOptions{Helm: &fleet.HelmOptions{Chart: "chart", Values: helmValues("replicas: many\n")}}
	if _, err := RenderFiles("show", files, opts); err == nil || !strings.Contains(err.Error(), "replicas") {
		t.Fatalf("got %v, want the schema's refusal of replicas", err)
	}
	opts.Helm.SkipSchemaValidation = true
	out, err := RenderFiles("show", files, opts)
	if err != nil {
		t.Fatalf("with skipSchemaValidation: %v", err)
	}
	if !strings.Contains(string(out.YAML), `\"replicas\":\"many\"`) {
		t.Errorf("rendered\n%s\nwant the values as given", out.YAML)
	}
}
