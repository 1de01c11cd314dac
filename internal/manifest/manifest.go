// Package manifest reads rendered manifests (multi-document YAML or JSON)
// into objects. It needs neither Helm nor kustomize, so the agent, which
// applies what the controller rendered, decodes with the same code as the
// renderer without linking either.
package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// Decode splits multi-document YAML into objects, in order, skipping empty
// documents. Numbers keep their integer type.
func Decode(manifests []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifests), 4096)
	var objs []*unstructured.Unstructured
	for i := 1; ; i++ {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("document %d of the rendered manifests is not valid YAML: %w", i, err)
		}
		if t := bytes.TrimSpace(raw); len(t) == 0 || bytes.Equal(t, []byte("null")) || bytes.Equal(t, []byte("{}")) {
			continue
		}
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(raw); err != nil {
			return nil, fmt.Errorf("document %d of the rendered manifests is not a Kubernetes object: %w", i, err)
		}
		objs = append(objs, obj)
	}
	return objs, nil
}
