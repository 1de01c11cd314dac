package policies

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
)

func TestObjects_EveryPolicyHasItsBinding(t *testing.T) {
	objs, err := Objects()
	if err != nil {
		t.Fatal(err)
	}
	policies, bindings := map[string]bool{}, map[string]string{}
	for _, o := range objs {
		switch o.Kind {
		case KindPolicy:
			policies[o.Name] = true
		case KindBinding:
			name, _ := o.Spec["policyName"].(string)
			bindings[o.Name] = name
		}
	}
	if len(policies) < 3 {
		t.Fatalf("%d policies embedded, want at least the kubeconfig-namespace, registration-token and approval ones: %v", len(policies), objs)
	}
	bound := map[string]bool{}
	for b, p := range bindings {
		if !policies[p] {
			t.Errorf("binding %s names policy %q, which is not shipped", b, p)
		}
		bound[p] = true
	}
	for p := range policies {
		if !bound[p] {
			t.Errorf("policy %s has no binding: it would never be enforced", p)
		}
	}
}

// kustomize/base/kustomization.yaml lists its resources by name: a policy
// file added here must be listed there too, or kustomize users miss it
// while the controller waits for it.
func TestObjects_EveryFileIsInTheKustomization(t *testing.T) {
	k, err := os.ReadFile(filepath.Join("..", "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	paths, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		if !strings.Contains(string(k), "- policies/"+p+"\n") {
			t.Errorf("kustomize/base/kustomization.yaml does not list policies/%s", p)
		}
	}
}

func TestRead_RejectsDuplicatesAndNamelessObjects(t *testing.T) {
	policy := "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\nmetadata: {name: p}\nspec: {failurePolicy: Fail}\n"
	for name, fsys := range map[string]fstest.MapFS{
		"duplicate": {"a.yaml": {Data: []byte(policy)}, "b.yaml": {Data: []byte(policy)}},
		"nameless":  {"a.yaml": {Data: []byte("apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\nspec: {}\n")}},
		"not yaml":  {"a.yaml": {Data: []byte("kind: [")}},
	} {
		if _, err := read(fsys); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	objs, err := read(fstest.MapFS{"a.yaml": {Data: []byte("# only a comment\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n---\n" + policy)}})
	if err != nil || len(objs) != 1 || objs[0].String() != "ValidatingAdmissionPolicy/p" {
		t.Errorf("objects %v, error %v; want the one policy, other kinds left out", objs, err)
	}
}
