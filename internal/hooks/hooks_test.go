package hooks

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gitops-fleet/fleet/internal/bundlecontent"
)

func obj(apiVersion, kind, name string, annotations map[string]string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(apiVersion)
	u.SetKind(kind)
	u.SetName(name)
	u.SetAnnotations(annotations)
	return u
}

func TestPhases(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    *unstructured.Unstructured
		want []bundlecontent.Phase
	}{
		{"plain object", obj("v1", "ConfigMap", "a", nil), []bundlecontent.Phase{bundlecontent.PhaseMain}},
		{"CRD", obj("apiextensions.k8s.io/v1", "CustomResourceDefinition", "a", nil), []bundlecontent.Phase{bundlecontent.PhaseCRDs}},
		{"a kind named like a CRD in another group", obj("example.com/v1", "CustomResourceDefinition", "a", nil), []bundlecontent.Phase{bundlecontent.PhaseMain}},
		{"two events, spaces and case as Helm reads them", obj("batch/v1", "Job", "a", map[string]string{Annotation: " Pre-Install , pre-upgrade"}), []bundlecontent.Phase{bundlecontent.PhasePreInstall, bundlecontent.PhasePreUpgrade}},
		{"test hook: never run", obj("v1", "Pod", "a", map[string]string{Annotation: "test"}), nil},
		{"Helm 2 test-success", obj("v1", "Pod", "a", map[string]string{Annotation: "test-success"}), nil},
		{"test and post-install: post-install only", obj("v1", "Pod", "a", map[string]string{Annotation: "test,post-install"}), []bundlecontent.Phase{bundlecontent.PhasePostInstall}},
		{"rollback hook: never run", obj("v1", "Pod", "a", map[string]string{Annotation: "pre-rollback"}), nil},
		{"unknown event: skipped whole, as Helm does", obj("v1", "Pod", "a", map[string]string{Annotation: "pre-install,sometime"}), nil},
		{"a CRD hook is a hook", obj("apiextensions.k8s.io/v1", "CustomResourceDefinition", "a", map[string]string{Annotation: "pre-install"}), []bundlecontent.Phase{bundlecontent.PhasePreInstall}},
	} {
		if got := Phases(tc.o); !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestCompare_WeightThenNameThenKind(t *testing.T) {
	w := func(kind, name, weight string) *unstructured.Unstructured {
		return obj("v1", kind, name, map[string]string{Annotation: "pre-install", WeightAnnotation: weight})
	}
	in := []*unstructured.Unstructured{
		w("Job", "b", "5"),
		w("Job", "z", "-5"),
		w("Job", "a", "0"),
		w("ConfigMap", "a", "0"),
		w("Widget", "a", "0"),
		w("ServiceAccount", "c", "not a number"), // weight 0, as Helm
	}
	slices.SortStableFunc(in, Compare)
	var got []string
	for _, o := range in {
		got = append(got, o.GetKind()+"/"+o.GetName())
	}
	want := []string{"Job/z", "ConfigMap/a", "Job/a", "Widget/a", "ServiceAccount/c", "Job/b"}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestDeletePolicies(t *testing.T) {
	none := obj("batch/v1", "Job", "a", map[string]string{Annotation: "pre-install"})
	if !HasDeletePolicy(none, BeforeHookCreation) || HasDeletePolicy(none, HookSucceeded) {
		t.Errorf("no policy: got %v, want before-hook-creation only (Helm's default)", DeletePolicies(none))
	}
	set := obj("batch/v1", "Job", "a", map[string]string{Annotation: "pre-install", DeleteAnnotation: "hook-succeeded, Hook-Failed"})
	if HasDeletePolicy(set, BeforeHookCreation) || !HasDeletePolicy(set, HookSucceeded) || !HasDeletePolicy(set, HookFailed) {
		t.Errorf("hook-succeeded,hook-failed: got %v", DeletePolicies(set))
	}
	crd := obj("apiextensions.k8s.io/v1", "CustomResourceDefinition", "a", map[string]string{Annotation: "pre-install", DeleteAnnotation: "hook-succeeded"})
	if HasDeletePolicy(crd, HookSucceeded) || HasDeletePolicy(crd, BeforeHookCreation) {
		t.Errorf("a CRD hook is never deleted")
	}
}
