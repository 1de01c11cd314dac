package deployer

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

// resourceCounts counts the resources of a deployment by state, as Fleet's
// agent does, from the full (not truncated) lists: each drifted resource
// is missing (deleted downstream), orphaned (should not exist) or
// modified; a resource not drifted but not healthy is notReady (missing
// when it is not found); the rest are ready. desiredReady counts them all.
func resourceCounts(all []fleet.BundleDeploymentResource, nonReady []fleet.NonReadyStatus, modified []fleet.ModifiedStatus) fleet.ResourceCounts {
	type key struct{ apiVersion, kind, namespace, name string }
	left := make(map[key]bool, len(all))
	for _, r := range all {
		left[key{r.APIVersion, r.Kind, r.Namespace, r.Name}] = true
	}
	var c fleet.ResourceCounts
	for _, r := range modified {
		k := key{r.APIVersion, r.Kind, r.Namespace, r.Name}
		switch {
		case r.Create:
			c.Missing++
		case r.Delete:
			c.Orphaned++
		default:
			c.Modified++
		}
		if !left[k] && !r.Delete {
			c.DesiredReady++ // missing from the inventory too
		}
		delete(left, k)
	}
	for _, r := range nonReady {
		k := key{r.APIVersion, r.Kind, r.Namespace, r.Name}
		if !left[k] {
			continue // counted as drifted
		}
		if r.Summary.State == fleet.SummaryOf("NotFound", "").State {
			c.Missing++
		} else {
			c.NotReady++
		}
		delete(left, k)
	}
	c.Ready = len(left)
	c.DesiredReady += len(all)
	return c
}

// recordCreated sets res[i].createdAt from the live object u.
func recordCreated(res []fleet.BundleDeploymentResource, i int, u *unstructured.Unstructured) {
	if i < len(res) {
		if t := u.GetCreationTimestamp(); !t.IsZero() {
			res[i].CreatedAt = ptr.To(t)
		}
	}
}
