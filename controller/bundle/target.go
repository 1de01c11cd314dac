package bundle

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

// matchTarget returns the first target of the Bundle that selects the
// cluster, by name, labels, cluster group or cluster group labels. A target
// with several criteria needs all of them. Invalid selectors are errors that
// name the target.
func matchTarget(b *fleet.Bundle, c *fleet.Cluster, groups []fleet.ClusterGroup) (*fleet.BundleTarget, error) {
	for i := range b.Spec.Targets {
		t := &b.Spec.Targets[i]
		ok, err := targetSelects(t, c, groups)
		if err != nil {
			return nil, fmt.Errorf("spec.targets[%d]: %w", i, err)
		}
		if ok {
			return t, nil
		}
	}
	return nil, nil
}

func targetSelects(t *fleet.BundleTarget, c *fleet.Cluster, groups []fleet.ClusterGroup) (bool, error) {
	if t.ClusterName == "" && t.ClusterSelector == nil && t.ClusterGroup == "" && t.ClusterGroupSelector == nil {
		return false, nil
	}
	if t.ClusterName != "" && t.ClusterName != c.Name {
		return false, nil
	}
	if t.ClusterSelector != nil {
		ok, err := selects(t.ClusterSelector, c.Labels)
		if err != nil || !ok {
			return false, err
		}
	}
	if t.ClusterGroup != "" || t.ClusterGroupSelector != nil {
		inGroup := false
		for i := range groups {
			g := &groups[i]
			if t.ClusterGroup != "" && g.Name != t.ClusterGroup {
				continue
			}
			if t.ClusterGroupSelector != nil {
				ok, err := selects(t.ClusterGroupSelector, g.Labels)
				if err != nil {
					return false, err
				}
				if !ok {
					continue
				}
			}
			ok, err := groupSelects(g, c)
			if err != nil {
				return false, fmt.Errorf("clusterGroup %s: %w", g.Name, err)
			}
			if ok {
				inGroup = true
				break
			}
		}
		if !inGroup {
			return false, nil
		}
	}
	return true, nil
}

// groupSelects reports whether a ClusterGroup selects a cluster (a missing
// selector selects none, an empty one all).
func groupSelects(g *fleet.ClusterGroup, c *fleet.Cluster) (bool, error) {
	if g.Spec.Selector == nil {
		return false, nil
	}
	return selects(g.Spec.Selector, c.Labels)
}

func selects(sel *metav1.LabelSelector, l map[string]string) (bool, error) {
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return false, err
	}
	return s.Matches(labels.Set(l)), nil
}
