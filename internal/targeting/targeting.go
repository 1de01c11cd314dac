// Package targeting decides which target of a Bundle selects a Cluster: the
// one rule the controller deploys by (controller/bundle) and `fleet render
// bundle` previews with, so a review shows exactly what the controller
// deploys.
package targeting

import (
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

// Groups are the ClusterGroups targets may consult.
type Groups struct {
	// Items are ClusterGroups of the Bundle's workspace.
	Items []fleet.ClusterGroup
	// Given says Items are only the groups someone handed over (`fleet
	// render bundle --group`), not every group of the workspace (the
	// controller's view). Then a target that needs a group that is not
	// among them is a *MissingGroupsError instead of selecting nothing.
	Given bool
}

// MissingGroupsError: a target needs ClusterGroups that were not given, so
// whether it selects the cluster is unknown.
type MissingGroupsError struct {
	// Target is the index of the target in spec.targets.
	Target int
	// Group is the group the target names; "" for a clusterGroupSelector
	// target, which needs every group of the workspace.
	Group string
}

func (e *MissingGroupsError) Error() string {
	if e.Group != "" {
		return fmt.Sprintf("spec.targets[%d] needs ClusterGroup %s to decide whether it selects the cluster: give its YAML (--group FILE)", e.Target, e.Group)
	}
	return fmt.Sprintf("spec.targets[%d] has a clusterGroupSelector: give the YAML of the workspace's ClusterGroups (--group FILE) to decide whether it selects the cluster", e.Target)
}

// Match returns the first target of the Bundle that selects the cluster, or
// nil. A target selects by name (clusterName), labels (clusterSelector),
// ClusterGroup name (clusterGroup) and ClusterGroup labels
// (clusterGroupSelector); with several of them it needs every one, and with
// none it selects nothing. A ClusterGroup without a selector selects no
// cluster, an empty selector every one. An invalid selector is an error
// that names the target. A target with doNotDeploy is returned like any
// other: it selects the cluster, to deploy nothing there.
func Match(b *fleet.Bundle, c *fleet.Cluster, groups Groups) (*fleet.BundleTarget, error) {
	for i := range b.Spec.Targets {
		t := &b.Spec.Targets[i]
		ok, err := selects(i, t, c, groups)
		if err != nil {
			return nil, err
		}
		if ok {
			return t, nil
		}
	}
	return nil, nil
}

func selects(i int, t *fleet.BundleTarget, c *fleet.Cluster, groups Groups) (bool, error) {
	if t.ClusterName == "" && t.ClusterSelector == nil && t.ClusterGroup == "" && t.ClusterGroupSelector == nil {
		return false, nil
	}
	if t.ClusterName != "" && t.ClusterName != c.Name {
		return false, nil
	}
	if t.ClusterSelector != nil {
		ok, err := labelsMatch(t.ClusterSelector, c.Labels)
		if err != nil {
			return false, fmt.Errorf("spec.targets[%d].clusterSelector: %w", i, err)
		}
		if !ok {
			return false, nil
		}
	}
	if t.ClusterGroup == "" && t.ClusterGroupSelector == nil {
		return true, nil
	}
	if groups.Given {
		switch {
		case t.ClusterGroup != "" && !slices.ContainsFunc(groups.Items, func(g fleet.ClusterGroup) bool { return g.Name == t.ClusterGroup }):
			return false, &MissingGroupsError{Target: i, Group: t.ClusterGroup}
		case t.ClusterGroup == "" && len(groups.Items) == 0:
			return false, &MissingGroupsError{Target: i}
		}
	}
	for j := range groups.Items {
		g := &groups.Items[j]
		if t.ClusterGroup != "" && g.Name != t.ClusterGroup {
			continue
		}
		if t.ClusterGroupSelector != nil {
			ok, err := labelsMatch(t.ClusterGroupSelector, g.Labels)
			if err != nil {
				return false, fmt.Errorf("spec.targets[%d].clusterGroupSelector: %w", i, err)
			}
			if !ok {
				continue
			}
		}
		if g.Spec.Selector == nil {
			continue
		}
		ok, err := labelsMatch(g.Spec.Selector, c.Labels)
		if err != nil {
			return false, fmt.Errorf("spec.targets[%d]: ClusterGroup %s: spec.selector: %w", i, g.Name, err)
		}
		if ok {
			return true, nil
		}
	}
	return false, nil
}

func labelsMatch(sel *metav1.LabelSelector, l map[string]string) (bool, error) {
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return false, err
	}
	return s.Matches(labels.Set(l)), nil
}

// Describe says why a cluster gets nothing from a Bundle: no target selects
// it (t nil), or the one that does has doNotDeploy.
func Describe(b *fleet.Bundle, c *fleet.Cluster, t *fleet.BundleTarget) string {
	if t != nil {
		name := "a target"
		if t.Name != "" {
			name = "target " + t.Name
		}
		return fmt.Sprintf("%s of Bundle %s selects cluster %s with doNotDeploy: the controller deploys nothing to it", name, b.Name, c.Name)
	}
	return fmt.Sprintf("no target of Bundle %s selects cluster %s: the controller deploys nothing to it", b.Name, c.Name)
}
