package config

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// DocumentSchema is the JSON schema (draft-07) of the configuration
// document: every field of Config with its type and no other (Parse refuses
// unknown fields), and what Rules say. Each call returns a new map.
func DocumentSchema() (map[string]any, error) {
	s := typeSchema(reflect.TypeFor[Config](), "", nil)
	for _, r := range Rules {
		if r.Schema == nil {
			continue
		}
		at := s
		for _, name := range strings.Split(r.Field, ".") {
			props, _ := at["properties"].(map[string]any)
			next, ok := props[name].(map[string]any)
			if !ok {
				return nil, fmt.Errorf("rule of %s: the document has no such field", r.Field)
			}
			at = next
		}
		mergeSchema(at, r.Schema)
	}
	return s, nil
}

// DurationFields are the paths of the document's Go duration fields.
func DurationFields() []string { return fieldsOfType(reflect.TypeFor[metav1.Duration]()) }

// QuantityFields are the paths of the document's quantity fields.
func QuantityFields() []string { return fieldsOfType(reflect.TypeFor[resource.Quantity]()) }

func fieldsOfType(t reflect.Type) []string {
	var paths []string
	typeSchema(reflect.TypeFor[Config](), "", func(path string, ft reflect.Type) {
		if ft == t {
			paths = append(paths, path)
		}
	})
	slices.Sort(paths)
	return paths
}

// typeSchema is the JSON schema of a Go type as encoding/json (and so
// Parse) reads it; visit, when set, is called with the path of each struct
// field.
func typeSchema(t reflect.Type, path string, visit func(path string, t reflect.Type)) map[string]any {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if visit != nil && path != "" {
		visit(path, t)
	}
	switch t {
	case reflect.TypeFor[metav1.Duration]():
		return map[string]any{"type": "string", "pattern": durationPattern, "description": "a Go duration such as 30s, 5m or 12h"}
	case reflect.TypeFor[resource.Quantity]():
		return map[string]any{"type": []any{"string", "integer"}, "pattern": quantityPattern, "description": "a quantity such as 32Mi or 512Ki"}
	case reflect.TypeFor[intstr.IntOrString]():
		return map[string]any{"type": []any{"integer", "string"}}
	}
	switch t.Kind() {
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int32, reflect.Int64:
		return map[string]any{"type": "integer"}
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return map[string]any{"type": "string"} // []byte: base64
		}
		return map[string]any{"type": "array", "items": typeSchema(t.Elem(), path+"[]", visit)}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": typeSchema(t.Elem(), path+"{}", visit)}
	case reflect.Struct:
		props := map[string]any{}
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if !f.IsExported() || name == "-" || name == "" {
				continue
			}
			p := name
			if path != "" {
				p = path + "." + name
			}
			props[name] = typeSchema(f.Type, p, visit)
		}
		return map[string]any{"type": "object", "additionalProperties": false, "properties": props}
	}
	panic(fmt.Sprintf("config: no JSON schema for %s (%s)", t, path))
}

// mergeSchema merges src over dst: objects key by key, anything else
// replaced.
func mergeSchema(dst, src map[string]any) {
	for k, v := range src {
		if sv, ok := v.(map[string]any); ok {
			if dv, ok := dst[k].(map[string]any); ok {
				mergeSchema(dv, sv)
				continue
			}
		}
		dst[k] = copySchema(v)
	}
}

// copySchema copies maps and slices, so that the merged schema shares
// nothing with Rules.
func copySchema(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = copySchema(e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = copySchema(e)
		}
		return out
	}
	return v
}
