package v1alpha1

import (
	"encoding/json"

	"k8s.io/apimachinery/pkg/runtime"
)

// GenericMap is free-form YAML/JSON data, such as Helm values. It keeps every
// key the user wrote (the schema preserves unknown fields).
//
// +kubebuilder:validation:Type=object
// +kubebuilder:pruning:PreserveUnknownFields
// +kubebuilder:object:generate=false
type GenericMap struct {
	Data map[string]any `json:"-"`
}

// MarshalJSON writes the map itself, not a wrapper object.
func (in GenericMap) MarshalJSON() ([]byte, error) {
	if in.Data == nil {
		return []byte("{}"), nil
	}
	return json.Marshal(in.Data)
}

// UnmarshalJSON reads any JSON object into the map.
func (in *GenericMap) UnmarshalJSON(data []byte) error {
	in.Data = map[string]any{}
	return json.Unmarshal(data, &in.Data)
}

// DeepCopyInto copies the map with JSON value semantics.
func (in *GenericMap) DeepCopyInto(out *GenericMap) {
	if in.Data == nil {
		out.Data = nil
		return
	}
	out.Data = runtime.DeepCopyJSON(in.Data)
}

// DeepCopy returns a deep copy of the map.
func (in *GenericMap) DeepCopy() *GenericMap {
	if in == nil {
		return nil
	}
	out := new(GenericMap)
	in.DeepCopyInto(out)
	return out
}
