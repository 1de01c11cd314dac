// Package strictyaml decodes user-written YAML or JSON the way the API server
// does for kubectl --validate=strict: field names are case-sensitive, and
// unknown or duplicate fields are errors, so a typo never silently becomes a
// default.
package strictyaml

import (
	"errors"
	"fmt"

	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
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
	return errors.Join(strictErrs...)
}
