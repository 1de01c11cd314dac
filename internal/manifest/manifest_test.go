package manifest

import (
	"strings"
	"testing"
)

func TestDecode_KeepsOrderSkipsEmptyDocumentsAndKeepsIntegers(t *testing.T) {
	in := `
---
apiVersion: v1
kind: ConfigMap
metadata: {name: b}
data: {k: v}
---
# only a comment
---
null
---
{}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: a}
spec: {replicas: 3}
`
	objs, err := Decode([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 2 || objs[0].GetName() != "b" || objs[1].GetName() != "a" {
		t.Fatalf("got %d objects, want b then a: %v", len(objs), objs)
	}
	if r, ok := objs[1].Object["spec"].(map[string]any)["replicas"].(int64); !ok || r != 3 {
		t.Errorf("replicas = %#v, want int64 3", objs[1].Object["spec"].(map[string]any)["replicas"])
	}
}

func TestDecode_NamesTheBadDocument(t *testing.T) {
	for in, want := range map[string]string{
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\nkind: [\n":  "document 2 of the rendered manifests is not valid YAML",
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n- a\n- b\n": "document 2 of the rendered manifests is not a Kubernetes object",
	} {
		if _, err := Decode([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Decode(%q) = %v, want an error containing %q", in, err, want)
		}
	}
}
