// Package strictyaml decodes user-written YAML or JSON the way the API server
// does for kubectl --validate=strict: field names are case-sensitive, and
// unknown or duplicate fields are errors, so a typo never silently becomes a
// default. An unknown field near a known one says which one was meant.
package strictyaml

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"

	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/gitops-fleet/fleet/internal/suggest"
)

// Unmarshal decodes data into v, failing on unknown, duplicate or
// differently-cased fields.
func Unmarshal(data []byte, v any) error {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return fmt.Errorf("not valid YAML or JSON: %w", err)
	}
	strictErrs, err := sigsjson.UnmarshalStrict(js, v)
	if err != nil {
		return err
	}
	for i, e := range strictErrs {
		strictErrs[i] = withSuggestion(e, reflect.TypeOf(v))
	}
	return errors.Join(strictErrs...)
}

var unknownField = regexp.MustCompile(`^unknown field "(.+)"$`)

// withSuggestion adds `did you mean "x"?` to an unknown-field error when a
// field of the same object is a near miss.
func withSuggestion(err error, t reflect.Type) error {
	m := unknownField.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	path := strings.Split(m[1], ".")
	for _, seg := range path[:len(path)-1] {
		if t = fieldType(t, seg); t == nil {
			return err
		}
	}
	last := path[len(path)-1]
	if i := strings.IndexByte(last, '['); i >= 0 {
		last = last[:i]
	}
	if s := suggest.Nearest(last, jsonFields(t)); s != "" {
		return fmt.Errorf("%w, did you mean %q?", err, s)
	}
	return err
}

// fieldType is the type of field seg ("name" or "name[3]") of struct type t
// (through pointers, slices and maps), nil when unknown.
func fieldType(t reflect.Type, seg string) reflect.Type {
	t = elem(t)
	if t.Kind() == reflect.Map {
		return elem(t.Elem()) // seg is a key
	}
	name, indexed := seg, false
	if i := strings.IndexByte(seg, '['); i >= 0 {
		name, indexed = seg[:i], true
	}
	f := findField(t, name)
	if f == nil {
		return nil
	}
	ft := f.Type
	if indexed {
		ft = elem(ft)
		if ft.Kind() == reflect.Slice || ft.Kind() == reflect.Array || ft.Kind() == reflect.Map {
			ft = ft.Elem()
		}
	}
	return ft
}

func elem(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// findField is the field of struct t whose JSON name is name (inline and
// embedded structs included).
func findField(t reflect.Type, name string) *reflect.StructField {
	t = elem(t)
	if t.Kind() != reflect.Struct {
		return nil
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		n, inline := jsonName(f)
		if inline {
			if found := findField(f.Type, name); found != nil {
				return found
			}
			continue
		}
		if n == name {
			return &f
		}
	}
	return nil
}

// jsonFields are the JSON names of the fields of struct type t.
func jsonFields(t reflect.Type) []string {
	t = elem(t)
	if t.Kind() != reflect.Struct {
		return nil
	}
	var out []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		n, inline := jsonName(f)
		switch {
		case inline:
			out = append(out, jsonFields(f.Type)...)
		case n != "":
			out = append(out, n)
		}
	}
	return out
}

// jsonName is the field's JSON name ("" when not encoded), or inline for an
// embedded struct without a name or a ",inline" one.
func jsonName(f reflect.StructField) (name string, inline bool) {
	tag := f.Tag.Get("json")
	if tag == "-" || (!f.IsExported() && !f.Anonymous) {
		return "", false
	}
	name, opts, _ := strings.Cut(tag, ",")
	if f.Anonymous && name == "" || strings.Contains(opts, "inline") {
		return "", true
	}
	if name == "" {
		name = f.Name
	}
	return name, false
}
