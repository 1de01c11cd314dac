package renderer_test

import (
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/utils/ptr"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/renderer"
)

// TestMergeOptionsCarriesEveryField sets each field of
// BundleDeploymentOptions and of HelmOptions in a target alone and expects
// MergeOptions to carry it to a cluster whose Bundle sets nothing: a field
// added to the API that MergeOptions forgets fails here.
func TestMergeOptionsCarriesEveryField(t *testing.T) {
	opts := reflect.TypeOf(fleet.BundleDeploymentOptions{})
	for i := range opts.NumField() {
		f := opts.Field(i)
		if f.Name == "Helm" {
			continue // field by field below
		}
		t.Run(f.Name, func(t *testing.T) {
			var over fleet.BundleDeploymentOptions
			reflect.ValueOf(&over).Elem().Field(i).Set(nonZero(t, f.Type, 0))
			got := renderer.MergeOptions(fleet.BundleDeploymentOptions{}, over)
			if want, have := reflect.ValueOf(over).Field(i).Interface(), reflect.ValueOf(got).Field(i).Interface(); !equality.Semantic.DeepEqual(want, have) {
				t.Errorf("a target's %s = %#v reached the cluster as %#v", f.Name, want, have)
			}
		})
	}
	helm := reflect.TypeOf(fleet.HelmOptions{})
	for i := range helm.NumField() {
		f := helm.Field(i)
		t.Run("Helm."+f.Name, func(t *testing.T) {
			h := &fleet.HelmOptions{}
			reflect.ValueOf(h).Elem().Field(i).Set(nonZero(t, f.Type, 0))
			got := renderer.MergeOptions(fleet.BundleDeploymentOptions{}, fleet.BundleDeploymentOptions{Helm: h})
			if got.Helm == nil {
				t.Fatalf("a target's helm.%s did not reach the cluster", f.Name)
			}
			if want, have := reflect.ValueOf(*h).Field(i).Interface(), reflect.ValueOf(*got.Helm).Field(i).Interface(); !equality.Semantic.DeepEqual(want, have) {
				t.Errorf("a target's helm.%s = %#v reached the cluster as %#v", f.Name, want, have)
			}
		})
	}
}

// nonZero is a value of type t that is not its zero value.
func nonZero(t *testing.T, typ reflect.Type, depth int) reflect.Value {
	if depth > 6 {
		t.Fatalf("type %s nests too deep for the test", typ)
	}
	v := reflect.New(typ).Elem()
	switch typ.Kind() {
	case reflect.Bool:
		v.SetBool(true)
	case reflect.String:
		v.SetString("x")
	case reflect.Int, reflect.Int32, reflect.Int64:
		v.SetInt(7)
	case reflect.Pointer:
		v.Set(nonZero(t, typ.Elem(), depth+1).Addr())
	case reflect.Slice:
		if typ.Elem().Kind() == reflect.Uint8 {
			v.SetBytes([]byte("x"))
			break
		}
		v.Set(reflect.Append(v, nonZero(t, typ.Elem(), depth+1)))
	case reflect.Map:
		v.Set(reflect.MakeMap(typ))
		v.SetMapIndex(reflect.ValueOf("k").Convert(typ.Key()), nonZero(t, typ.Elem(), depth+1))
	case reflect.Interface:
		v.Set(reflect.ValueOf("x"))
	case reflect.Struct:
		if typ == reflect.TypeOf(fleet.GenericMap{}) {
			v.Set(reflect.ValueOf(fleet.GenericMap{Data: map[string]any{"k": "v"}}))
			break
		}
		for i := range typ.NumField() {
			if typ.Field(i).IsExported() {
				v.Field(i).Set(nonZero(t, typ.Field(i).Type, depth+1))
			}
		}
	default:
		t.Fatalf("no non-zero value for %s", typ)
	}
	return v
}

// TestMergeOptionsAsFleet checks the merge rules where the Bundle and the
// target both set an option.
func TestMergeOptionsAsFleet(t *testing.T) {
	base := fleet.BundleDeploymentOptions{
		Helm: &fleet.HelmOptions{
			Values:         &fleet.GenericMap{Data: map[string]any{"a": map[string]any{"x": int64(1), "y": int64(2)}, "keep": true}},
			TemplateValues: map[string]string{"t1": "a", "t2": "b"},
			ValuesFrom: []fleet.ValuesFrom{
				{ConfigMapKeyRef: &fleet.ConfigMapKeySelector{LocalObjectReference: fleet.LocalObjectReference{Name: "cm"}, Key: "v"}},
			},
			Repo: "https://charts.example", Version: "1.0.0",
		},
		IgnoreOptions:   &fleet.IgnoreOptions{Conditions: []map[string]string{{"type": "Ready", "status": "False"}}},
		CreateNamespace: ptr.To(true),
		Diff:            &fleet.DiffOptions{ComparePatches: []fleet.ComparePatch{{Kind: "Deployment", Name: "a", JsonPointers: []string{"/spec/replicas"}}}},
		YAML:            &fleet.YAMLOptions{Overlays: []string{"base"}},
	}
	over := fleet.BundleDeploymentOptions{
		Helm: &fleet.HelmOptions{
			Values:         &fleet.GenericMap{Data: map[string]any{"a": map[string]any{"y": int64(3)}}},
			TemplateValues: map[string]string{"t2": "c"},
			ValuesFrom: []fleet.ValuesFrom{
				{ConfigMapKeyRef: &fleet.ConfigMapKeySelector{LocalObjectReference: fleet.LocalObjectReference{Name: "cm"}, Key: "v"}},
				{SecretKeyRef: &fleet.SecretKeySelector{LocalObjectReference: fleet.LocalObjectReference{Name: "s"}}},
			},
			Version: "2.0.0",
		},
		IgnoreOptions:   &fleet.IgnoreOptions{}, // what fleet apply writes: changes nothing
		CreateNamespace: ptr.To(false),
		Diff:            &fleet.DiffOptions{ComparePatches: []fleet.ComparePatch{{Kind: "Deployment", Name: "a", JsonPointers: []string{"/spec/template"}}}},
		YAML:            &fleet.YAMLOptions{Overlays: []string{"prod"}},
	}
	got := renderer.MergeOptions(base, over)
	want := map[string]any{"a": map[string]any{"x": int64(1), "y": int64(3)}, "keep": true}
	if !equality.Semantic.DeepEqual(got.Helm.Values.Data, want) {
		t.Errorf("values = %v, want the target's merged deeply over the Bundle's: %v", got.Helm.Values.Data, want)
	}
	if tv := got.Helm.TemplateValues; tv["t1"] != "a" || tv["t2"] != "c" {
		t.Errorf("templateValues = %v, want t1=a (Bundle) and t2=c (target)", tv)
	}
	if len(got.Helm.ValuesFrom) != 2 || got.Helm.ValuesFrom[1].SecretKeyRef == nil {
		t.Errorf("valuesFrom = %+v, want the ConfigMap once and the Secret added", got.Helm.ValuesFrom)
	}
	if got.Helm.Repo != "https://charts.example" || got.Helm.Version != "2.0.0" {
		t.Errorf("repo %q version %q, want the Bundle's repo and the target's version", got.Helm.Repo, got.Helm.Version)
	}
	if got.IgnoreOptions == nil || len(got.IgnoreOptions.Conditions) != 1 {
		t.Errorf("ignore = %+v, want the Bundle's condition kept under a target's `ignore: {}`", got.IgnoreOptions)
	}
	if got.CreateNamespace == nil || *got.CreateNamespace {
		t.Errorf("createNamespace = %v, want the target's false", got.CreateNamespace)
	}
	if cp := got.Diff.ComparePatches; len(cp) != 1 || cp[0].JsonPointers[0] != "/spec/template" {
		t.Errorf("comparePatches = %+v, want the target's entry for Deployment a in place of the Bundle's", cp)
	}
	if o := got.YAML.Overlays; len(o) != 2 || o[0] != "base" || o[1] != "prod" {
		t.Errorf("overlays = %v, want [base prod]", o)
	}
	if base.Helm.Values.Data["a"].(map[string]any)["y"] != int64(2) || len(base.Helm.ValuesFrom) != 1 || base.Helm.TemplateValues["t2"] != "b" {
		t.Errorf("MergeOptions changed the Bundle's own options: %+v", base.Helm)
	}
}
