package deployer

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

// withoutIgnoredConditions is u without the status conditions that
// ignore.conditions names, for the health check (Fleet's meaning): a
// condition is left out when it has every key of one of the maps with that
// value (so {type: Ready, status: "False"} leaves out a Ready condition
// that is False, and an empty map leaves out every condition, as in
// Fleet). u itself is not changed; without anything to ignore, u is
// returned.
func withoutIgnoredConditions(u *unstructured.Unstructured, ignore *fleet.IgnoreOptions) *unstructured.Unstructured {
	if ignore == nil || len(ignore.Conditions) == 0 {
		return u
	}
	conds, found, err := unstructured.NestedSlice(u.Object, "status", "conditions")
	if err != nil || !found {
		return u // no list of conditions: nothing to leave out
	}
	kept := make([]any, 0, len(conds))
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if !ok || !ignoredCondition(m, ignore.Conditions) {
			kept = append(kept, c)
		}
	}
	if len(kept) == len(conds) {
		return u
	}
	out := u.DeepCopy()
	if err := unstructured.SetNestedSlice(out.Object, kept, "status", "conditions"); err != nil {
		return u
	}
	return out
}

func ignoredCondition(c map[string]any, ignore []map[string]string) bool {
	for _, want := range ignore {
		if conditionHas(c, want) {
			return true
		}
	}
	return false
}

// conditionHas reports whether c has every key of want with its value
// (values compared as text: status "False", observedGeneration "3").
func conditionHas(c map[string]any, want map[string]string) bool {
	for k, v := range want {
		got, ok := c[k]
		if !ok {
			return false
		}
		s, isString := got.(string)
		if !isString {
			s = fmt.Sprint(got)
		}
		if s != v {
			return false
		}
	}
	return true
}
