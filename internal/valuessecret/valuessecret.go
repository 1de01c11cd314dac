// Package valuessecret reads the Secret in which Fleet's `fleet apply` (and
// Rancher's managed charts) keep a Bundle's Helm values out of the Bundle:
// the Secret is named like the Bundle, in its namespace, and the Bundle's
// spec.valuesHash is the hash of the Secret's data. Key "values.yaml" holds
// spec.helm.values, a key named like a target that target's helm.values,
// each a JSON (or YAML) map.
//
// The values are put back into the Bundle only in memory, to render it;
// they never go into a BundleDeployment, a status, an event or a log.
package valuessecret

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

// Type is the Secret type Fleet's fleet apply gives a Bundle's values Secret.
const Type corev1.SecretType = "fleet.cattle.io/bundle-values/v1alpha1"

// BundleKey holds the Bundle's own spec.helm.values; every other key holds
// the helm.values of the target of that name.
const BundleKey = "values.yaml"

// Problem is why a Bundle's values cannot be read from its Secret. Waiting
// problems pass once the writer has written the Secret (it writes the
// Secret first, then the Bundle); the others need the Secret fixed.
type Problem struct {
	Reason  string
	Message string
	Waiting bool
}

func (p *Problem) Error() string { return p.Message }

// Hash is the hash Fleet's fleet apply writes into spec.valuesHash for a
// Secret's data: the hex sha256 of the data's JSON (keys sorted, values
// base64), so a Bundle names exactly one content of its Secret.
func Hash(data map[string][]byte) string {
	b, _ := json.Marshal(data) // a map of byte slices always marshals
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Missing is the Problem of a Bundle whose values Secret does not exist.
func Missing(b *fleet.Bundle) *Problem {
	return &Problem{Reason: fleet.WaitingForValuesReason, Waiting: true, Message: fmt.Sprintf(
		"spec.valuesHash: the Bundle's Helm values are in Secret %s/%s, which does not exist (yet): fleet apply writes it before the Bundle; write it, or put the values in spec.helm.values and drop spec.valuesHash",
		b.Namespace, b.Name)}
}

// Apply returns a copy of b with the values of its values Secret s in
// spec.helm.values and in the helm.values of each target the Secret has a
// key for, as Fleet sets them (a Secret's values replace the Bundle's own).
// s must be the Secret named like b, in b's namespace.
func Apply(b *fleet.Bundle, s *corev1.Secret) (*fleet.Bundle, error) {
	where := fmt.Sprintf("Secret %s/%s", s.Namespace, s.Name)
	if s.Type != Type && s.Type != corev1.SecretTypeOpaque && s.Type != "" {
		return nil, &Problem{Reason: fleet.ValuesSecretInvalidReason, Message: fmt.Sprintf(
			"spec.valuesHash: %s, named like the Bundle, is of type %s, not a values Secret (%s): it is not read; rename the Bundle or that Secret",
			where, s.Type, Type)}
	}
	// The Secret's own hash is not quoted: the status is read by more
	// than those who may read the Secret, and a hash of short values can
	// be guessed back.
	if Hash(s.Data) != b.Spec.ValuesHash {
		return nil, &Problem{Reason: fleet.WaitingForValuesReason, Waiting: true, Message: fmt.Sprintf(
			"spec.valuesHash: %s holds other values than the Bundle names (spec.valuesHash %s): waiting for fleet apply to write both; if nothing is writing them, run fleet apply again",
			where, b.Spec.ValuesHash)}
	}
	out := b.DeepCopy()
	if data, ok := s.Data[BundleKey]; ok && len(data) > 0 {
		m, err := valuesMap(data)
		if err != nil {
			return nil, invalid(where, BundleKey, err)
		}
		if out.Spec.Helm == nil {
			out.Spec.Helm = &fleet.HelmOptions{}
		}
		out.Spec.Helm.Values = m
	}
	for i := range out.Spec.Targets {
		t := &out.Spec.Targets[i]
		if t.Name == "" || t.Name == BundleKey {
			continue
		}
		data, ok := s.Data[t.Name]
		if !ok || len(data) == 0 {
			continue
		}
		m, err := valuesMap(data)
		if err != nil {
			return nil, invalid(where, t.Name, err)
		}
		if t.Helm == nil {
			t.Helm = &fleet.HelmOptions{}
		}
		t.Helm.Values = m
	}
	return out, nil
}

// valuesMap reads one key's values: a JSON or YAML map.
func valuesMap(data []byte) (*fleet.GenericMap, error) {
	var m map[string]any
	if err := yaml.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	return &fleet.GenericMap{Data: m}, nil
}

// invalid is the Problem of a key whose values do not read. The parser's
// message may quote the values, which may be secret: only its position
// is kept.
func invalid(where, key string, err error) *Problem {
	return &Problem{Reason: fleet.ValuesSecretInvalidReason, Message: fmt.Sprintf(
		"spec.valuesHash: key %s of %s is not a JSON or YAML map of Helm values (%s); fleet apply writes each as JSON",
		key, where, positionOnly(err))}
}

// positionOnly keeps what a parse error says about where the input is
// wrong, never the input itself.
func positionOnly(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("syntax error at byte %d", se.Offset)
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("a %s where a map was expected", te.Value)
	}
	return "it does not parse"
}
