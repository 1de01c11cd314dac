package bundlereader

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	yamlv3 "go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/util/validation"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/strictyaml"
)

// FleetYAML is a fleet.yaml: Fleet's format, a BundleSpec with a name,
// labels and the per-cluster customisations on top.
type FleetYAML struct {
	// Name replaces the Bundle name derived from the path.
	Name string `json:"name,omitempty"`
	// Labels are added to the Bundle (dependsOn selectors use them).
	Labels map[string]string `json:"labels,omitempty"`

	fleet.BundleSpec `json:",inline"`

	// TargetCustomizations become spec.targets (after targets written
	// here): options per selected cluster.
	TargetCustomizations []fleet.BundleTarget `json:"targetCustomizations,omitempty"`
	// OverrideTargets replace the GitRepo's targets for this Bundle.
	OverrideTargets []fleet.BundleTargetRestriction `json:"overrideTargets,omitempty"`
	// ImageScans are Fleet's image scans; refused here (not supported).
	ImageScans []map[string]any `json:"imageScans,omitempty"`
}

// FieldError is a mistake in a file the reader reads (a fleet.yaml, a
// values file), where it is: the file (relative to the checkout), the line
// when known (0: not known), the field (dotted path) when known.
type FieldError struct {
	File  string
	Line  int
	Field string
	Err   error
}

func (e *FieldError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":" + strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	msg := e.Err.Error()
	// Strict decoding errors name the field already.
	if e.Field != "" && !strings.Contains(msg, `"`+e.Field+`"`) {
		b.WriteString(e.Field + ": ")
	}
	b.WriteString(msg)
	return b.String()
}

func (e *FieldError) Unwrap() error { return e.Err }

var (
	quotedField = regexp.MustCompile(`field "([^"]+)"`)
	typedField  = regexp.MustCompile(`cannot unmarshal (\S+) into Go struct field [A-Za-z0-9_]+\.(\S+) of type (.+)$`)
	yamlLine    = regexp.MustCompile(`line (\d+)`)
)

// parseFleetYAML decodes a fleet.yaml strictly (unknown, duplicate and
// differently-cased fields are errors, with the field likely meant) and
// checks what the API server would not: every error names file, line and
// field.
func parseFleetYAML(file string, data []byte) (*FleetYAML, error) {
	fy := &FleetYAML{}
	err := strictyaml.Unmarshal(data, fy)
	if err != nil {
		return nil, locate(file, data, err)
	}
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{File: file, Line: lineOf(data, field), Field: field, Err: fmt.Errorf(format, args...)})
	}
	if fy.Name != "" {
		for _, m := range validation.IsDNS1123Subdomain(fy.Name) {
			bad("name", "%q is not a valid Bundle name: %s", fy.Name, m)
		}
	}
	for k, v := range fy.Labels {
		for _, m := range validation.IsQualifiedName(k) {
			bad("labels", "label key %q: %s", k, m)
		}
		for _, m := range validation.IsValidLabelValue(v) {
			bad("labels", "label %q value %q: %s", k, v, m)
		}
		if k == fleet.RepoLabel || k == fleet.CommitLabel {
			bad("labels", "label %q is set by fleet apply (the GitRepo and commit), not in fleet.yaml", k)
		}
	}
	if len(fy.Resources) > 0 {
		bad("resources", "resources are the directory's files, read by fleet apply; remove resources from fleet.yaml")
	}
	if fy.ContentsID != "" {
		bad("contentsId", "contentsId is set by fleet apply for resources too large for one object, not in fleet.yaml")
	}
	if fy.ValuesHash != "" {
		bad("valuesHash", "valuesHash is set by Fleet's fleet apply, not in fleet.yaml")
	}
	if fy.HelmOpOptions != nil {
		bad("helmOpOptions", "helmOpOptions belong to Bundles made by a HelmOp, not to fleet.yaml")
	}
	if len(fy.ImageScans) > 0 {
		bad("imageScans", "image scans are not supported; remove imageScans")
	}
	for i, dep := range fy.DependsOn {
		field := fmt.Sprintf("dependsOn[%d]", i)
		if dep.Name == "" && dep.Selector == nil {
			bad(field, "give a name or a selector of the Bundle this one depends on")
		}
		for j, s := range dep.AcceptedStates {
			if _, ok := fleet.StateRank[s]; !ok {
				bad(fmt.Sprintf("%s.acceptedStates[%d]", field, j), "unknown state %q (one of Ready, NotReady, Pending, OutOfSync, Modified, WaitApplied, ErrApplied)", s)
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return fy, nil
}

// locate turns a strict decoding error into FieldErrors with lines.
func locate(file string, data []byte, err error) error {
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	} else {
		errs = []error{err}
	}
	out := make([]error, 0, len(errs))
	for _, e := range errs {
		fe := &FieldError{File: file, Err: e}
		msg := e.Error()
		if m := quotedField.FindStringSubmatch(msg); m != nil {
			fe.Field = m[1]
		} else if m := typedField.FindStringSubmatch(msg); m != nil {
			fe.Field = jsonPath(m[2])
			fe.Err = fmt.Errorf("wants a value of Go type %s, not %s", m[3], article(m[1]))
		}
		if fe.Field != "" {
			fe.Line = lineOf(data, fe.Field)
		} else if m := yamlLine.FindStringSubmatch(msg); m != nil {
			fe.Line, _ = strconv.Atoi(m[1])
		}
		out = append(out, fe)
	}
	return errors.Join(out...)
}

func article(kind string) string {
	if strings.ContainsAny(kind[:1], "aeiou") {
		return "an " + kind
	}
	return "a " + kind
}

// jsonPath drops the Go names of embedded structs (BundleSpec.) from a
// decoding error's field path, leaving the YAML fields.
func jsonPath(p string) string {
	segs := strings.Split(p, ".")
	out := segs[:0]
	for _, s := range segs {
		if s != "" && (s[0] < 'A' || s[0] > 'Z') {
			out = append(out, s)
		}
	}
	return strings.Join(out, ".")
}

// lineOf is the line of field (a dotted path with [i] indexes, as strict
// decoding names fields) in the YAML document data, 0 when not found.
func lineOf(data []byte, field string) int {
	var doc yamlv3.Node
	if yamlv3.Unmarshal(data, &doc) != nil || len(doc.Content) == 0 {
		return 0
	}
	n := doc.Content[0]
	line := 0
	for _, seg := range strings.Split(field, ".") {
		name, idx := seg, -1
		if i := strings.IndexByte(seg, '['); i >= 0 && strings.HasSuffix(seg, "]") {
			name = seg[:i]
			idx, _ = strconv.Atoi(seg[i+1 : len(seg)-1])
		}
		if n.Kind != yamlv3.MappingNode {
			return line
		}
		var next *yamlv3.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == name {
				line, next = n.Content[i].Line, n.Content[i+1]
			}
		}
		if next == nil {
			return line
		}
		n = next
		if idx >= 0 {
			if n.Kind != yamlv3.SequenceNode || idx >= len(n.Content) {
				return line
			}
			n = n.Content[idx]
			line = n.Line
		}
	}
	return line
}
