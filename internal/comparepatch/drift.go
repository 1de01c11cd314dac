package comparepatch

import (
	"fmt"
	"reflect"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// maxDriftPaths bounds the field paths named in one summary.
const maxDriftPaths = 5

// Drift compares a live object with what applying the bundle would make of
// it (server-side apply found them different), leaving out what the rules
// name: whether they still differ, and a summary of how. The agent's drift
// check and `fleet diff --live` both decide with it, so they agree.
func Drift(r *Rules, live, desired *unstructured.Unstructured) (summary string, drifted bool, err error) {
	l, lApplied, err := r.Normalize(live)
	if err != nil {
		return "", false, err
	}
	d, dApplied, err := r.Normalize(desired)
	if err != nil {
		return "", false, err
	}
	summary = Summary(l.Object, d.Object)
	if (lApplied || dApplied) && summary == "" {
		return "", false, nil
	}
	return summary, true, nil
}

// Summary names the fields in which the live object differs from the
// desired one: "changed data.a, metadata.labels.x". It names paths only,
// never values, so Secret data cannot leak. Status and server-owned
// metadata are ignored.
func Summary(live, desired map[string]any) string {
	var paths []string
	for _, top := range unionKeys(live, desired) {
		switch top {
		case "status", "apiVersion", "kind":
			continue
		case "metadata":
			lm, _ := live["metadata"].(map[string]any)
			dm, _ := desired["metadata"].(map[string]any)
			for _, f := range []string{"labels", "annotations"} {
				diffPaths("metadata."+f, lm[f], dm[f], 1, &paths)
			}
			continue
		}
		diffPaths(top, live[top], desired[top], 2, &paths)
	}
	if len(paths) == 0 {
		return ""
	}
	sort.Strings(paths)
	more := ""
	if len(paths) > maxDriftPaths {
		more = fmt.Sprintf(" and %d more", len(paths)-maxDriftPaths)
		paths = paths[:maxDriftPaths]
	}
	return "changed " + strings.Join(paths, ", ") + more
}

// diffPaths appends the paths under prefix where a and b differ, descending
// into maps at most depth levels.
func diffPaths(prefix string, a, b any, depth int, out *[]string) {
	if reflect.DeepEqual(a, b) {
		return
	}
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if !aok || !bok || depth == 0 {
		*out = append(*out, prefix)
		return
	}
	for _, k := range unionKeys(am, bm) {
		diffPaths(prefix+"."+k, am[k], bm[k], depth-1, out)
	}
}

func unionKeys(a, b map[string]any) []string {
	keys := make([]string, 0, len(a)+len(b))
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}
