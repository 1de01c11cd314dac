package deployer

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gitops-fleet/fleet/internal/comparepatch"
)

// driftSummary names the fields in which the live object differs from what
// applying the bundle would make of it (paths only, never values).
func driftSummary(live, desired map[string]any) string { return comparepatch.Summary(live, desired) }

// drifts compares the live object with what applying the bundle would make
// of it (server-side apply found them different), leaving out what
// diff.comparePatches name: whether they still differ, and the summary of
// how. The rule is comparepatch.Drift, shared with `fleet diff --live`.
func drifts(ignored *comparepatch.Rules, live, desired *unstructured.Unstructured) (string, bool, error) {
	return comparepatch.Drift(ignored, live, desired)
}
