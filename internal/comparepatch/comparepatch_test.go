package comparepatch

import (
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

func obj(t *testing.T, y string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(y), &u.Object); err != nil {
		t.Fatal(err)
	}
	return u
}

const deployment = `apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: app}
spec:
  replicas: 3
  template:
    spec:
      containers: [{name: web, image: nginx}]
`

// rules are parsed from YAML as fleet apply writes them into a Bundle.
func rules(t *testing.T, y string) *Rules {
	t.Helper()
	d := &fleet.DiffOptions{}
	if err := yaml.UnmarshalStrict([]byte(y), d); err != nil {
		t.Fatal(err)
	}
	r, err := New(d)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestNormalize_JSONPointersMatchGroupKindAndOptionalName(t *testing.T) {
	for _, tc := range []struct {
		name, rules string
		removed     bool
	}{
		{"exact resource", `comparePatches: [{apiVersion: apps/v1, kind: Deployment, name: web, namespace: app, jsonPointers: [/spec/replicas]}]`, true},
		{"empty name and namespace match every one", `comparePatches: [{apiVersion: apps/v1, kind: Deployment, jsonPointers: [/spec/replicas]}]`, true},
		{"the version does not matter", `comparePatches: [{apiVersion: apps/v1beta2, kind: Deployment, jsonPointers: [/spec/replicas]}]`, true},
		{"kind glob", `comparePatches: [{apiVersion: apps/v1, kind: "*", jsonPointers: [/spec/replicas]}]`, true},
		{"other name", `comparePatches: [{apiVersion: apps/v1, kind: Deployment, name: api, jsonPointers: [/spec/replicas]}]`, false},
		{"other namespace", `comparePatches: [{apiVersion: apps/v1, kind: Deployment, namespace: other, jsonPointers: [/spec/replicas]}]`, false},
		{"other group", `comparePatches: [{apiVersion: v1, kind: Deployment, jsonPointers: [/spec/replicas]}]`, false},
		{"other kind", `comparePatches: [{apiVersion: apps/v1, kind: StatefulSet, jsonPointers: [/spec/replicas]}]`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := obj(t, deployment)
			got, applied, err := rules(t, tc.rules).Normalize(u)
			if err != nil {
				t.Fatal(err)
			}
			_, has, _ := unstructured.NestedFieldNoCopy(got.Object, "spec", "replicas")
			if applied != tc.removed || has == tc.removed {
				t.Fatalf("applied %v, replicas still there %v; want removed %v", applied, has, tc.removed)
			}
			if _, still, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "replicas"); !still {
				t.Fatal("the input was changed")
			}
		})
	}
}

func TestNormalize_OperationsNeedTheExactResource(t *testing.T) {
	r := rules(t, `comparePatches:
- apiVersion: apps/v1
  kind: Deployment
  name: web
  namespace: app
  operations:
  - {op: remove, path: /spec/template/spec/containers/0/image}
  - {op: remove, path: /spec/notThere}
- apiVersion: apps/v1
  kind: Deployment
  name: web
  operations:
  - {op: remove, path: /spec/replicas}
`)
	got, applied, err := r.Normalize(obj(t, deployment))
	if err != nil || !applied {
		t.Fatalf("applied %v: %v", applied, err)
	}
	want := obj(t, strings.Replace(deployment, ", image: nginx", "", 1))
	gj, _ := json.Marshal(got.Object)
	wj, _ := json.Marshal(want.Object)
	if string(gj) != string(wj) {
		t.Fatalf("got %v\nwant %v (the op without namespace must not match a namespaced object; a missing path is skipped)", got.Object, want.Object)
	}
}

func TestIgnoresMissing_IgnoreOperation(t *testing.T) {
	r := rules(t, `comparePatches:
- {apiVersion: apps/v1, kind: Deployment, name: "we.*", namespace: app, operations: [{op: ignore}]}
- {apiVersion: v1, kind: ConfigMap, namespace: app, operations: [{op: ignore}]}
- {apiVersion: v1, kind: Secret, name: creds, namespace: app, jsonPointers: [/data]}
`)
	for _, tc := range []struct {
		y    string
		want bool
	}{
		{deployment, true},
		{"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: api, namespace: app}\n", false},
		{"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: other}\n", false},
		{"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: any, namespace: app}\n", true},
		{"apiVersion: v1\nkind: Secret\nmetadata: {name: creds, namespace: app}\n", false},
	} {
		u := obj(t, tc.y)
		if got := r.IgnoresMissing(u); got != tc.want {
			t.Errorf("%s %s/%s: ignored %v, want %v", u.GetKind(), u.GetNamespace(), u.GetName(), got, tc.want)
		}
	}
	// An ignored resource that changed is still drift: ignore does not
	// normalize it.
	if _, applied, _ := r.Normalize(obj(t, deployment)); applied {
		t.Error("an ignore operation changed the object")
	}
}

func TestNew_InvalidPatchesSayWhatToFix(t *testing.T) {
	for _, tc := range []struct{ y, want string }{
		{`comparePatches: [{apiVersion: a/b/c, kind: X}]`, "diff.comparePatches[0]: apiVersion"},
		{`comparePatches: [{apiVersion: v1, kind: X, operations: [{op: delete, path: /a}]}]`, `diff.comparePatches[0].operations[0]: op "delete"`},
		{`comparePatches: [{apiVersion: v1, kind: X, name: "(", operations: [{op: ignore}]}]`, "regular expression"},
		{`comparePatches: [{apiVersion: v1, kind: "[", jsonPointers: [/a]}]`, "kind"},
	} {
		d := &fleet.DiffOptions{}
		if err := yaml.UnmarshalStrict([]byte(tc.y), d); err != nil {
			t.Fatal(err)
		}
		_, err := New(d)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one saying %q", tc.y, err, tc.want)
		}
	}
	if r, err := New(&fleet.DiffOptions{}); r != nil || err != nil {
		t.Errorf("empty options: %v, %v", r, err)
	}
	var none *Rules
	if u, applied, err := none.Normalize(obj(t, deployment)); applied || err != nil || u == nil {
		t.Error("nil rules must leave the object as it is")
	}
}
