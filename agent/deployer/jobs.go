package deployer

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

// waitsForJobs is helm.waitForJobs: the health wait includes the Jobs'
// completion. Without it a Job is ready as kstatus says, once started
// (Helm's --wait without --wait-for-jobs does not wait for Jobs either).
func waitsForJobs(opts fleet.BundleDeploymentOptions) bool {
	return opts.Helm != nil && opts.Helm.WaitForJobs
}

// jobIncomplete says whether an object is a Job without the Complete
// condition.
func jobIncomplete(u *unstructured.Unstructured) bool {
	if u.GroupVersionKind().GroupKind().String() != "Job.batch" {
		return false
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, _ := c.(map[string]any); m["type"] == "Complete" && m["status"] == "True" {
			return false
		}
	}
	return true
}
