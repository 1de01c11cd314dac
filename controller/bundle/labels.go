package bundle

import (
	"strings"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

// deploymentLabels are the labels of a Bundle's BundleDeployment for
// Cluster c, as Fleet makes them: the Bundle's own labels (so a dependsOn
// selector over Bundle labels matches its BundleDeployments on the
// agent's side), without kubectl.kubernetes.io/ ones and without *cattle.io/
// ones other than fleet.cattle.io/; then the labels the controller owns,
// which no Bundle label overrides: the Bundle's name and workspace, the
// Cluster's name and namespace, managed. fleet.AgentBundleLabel is left
// out: ensureDeployment sets it only on the agent Bundle it made.
func deploymentLabels(b *fleet.Bundle, c *fleet.Cluster) map[string]string {
	l := make(map[string]string, len(b.Labels)+5)
	for k, v := range b.Labels {
		switch {
		case k == fleet.AgentBundleLabel:
		case strings.HasPrefix(k, "fleet.cattle.io/"):
			l[k] = v
		case strings.HasPrefix(k, "kubectl.kubernetes.io/"), strings.Contains(k, "cattle.io/"):
		default:
			l[k] = v
		}
	}
	l[fleet.BundleLabel] = b.Name
	l[fleet.BundleNamespaceLabel] = b.Namespace
	l[fleet.ClusterLabel] = c.Name
	l[fleet.ClusterNamespaceLabel] = c.Namespace
	l[fleet.ManagedLabel] = "true"
	return l
}

// dependsOn is the Bundle's dependsOn for its BundleDeployments: the agent
// checks it on its cluster (agent/deployer/dependencies.go).
func dependsOn(b *fleet.Bundle) []fleet.BundleRef {
	if len(b.Spec.DependsOn) == 0 {
		return nil
	}
	out := make([]fleet.BundleRef, len(b.Spec.DependsOn))
	for i := range b.Spec.DependsOn {
		b.Spec.DependsOn[i].DeepCopyInto(&out[i])
	}
	return out
}
