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
	// Restriction is set when a spec.targetRestrictions entry needs the
	// groups; Target is then that entry's index.
	Restriction bool
	// Group is the group the target names; "" for a clusterGroupSelector
	// target, which needs every group of the workspace.
	Group string
}

func (e *MissingGroupsError) Error() string {
	field := fmt.Sprintf("spec.targets[%d]", e.Target)
	if e.Restriction {
		field = fmt.Sprintf("spec.targetRestrictions[%d]", e.Target)
	}
	if e.Group != "" {
		return fmt.Sprintf("%s needs ClusterGroup %s to decide whether it selects the cluster: give its YAML (--group FILE)", field, e.Group)
	}
	return fmt.Sprintf("%s has a clusterGroupSelector: give the YAML of the workspace's ClusterGroups (--group FILE) to decide whether it selects the cluster", field)
}

// Match returns the target of the Bundle that decides whether the cluster
// gets it, or nil when none selects it: the first target that selects the
// cluster, or, with targetCustomizationMode AllMatches, the first selecting
// target with doNotDeploy if there is one (any of them keeps the Bundle
// away). A target selects by name (clusterName), labels (clusterSelector),
// ClusterGroup name (clusterGroup) and ClusterGroup labels
// (clusterGroupSelector); with several of them it needs every one, and with
// none it selects nothing. A ClusterGroup without a selector selects no
// cluster, an empty selector every one. With targetRestrictions, no target
// selects a cluster that no restriction selects (restrictions select by
// the same rules). An invalid selector is an error that names the target
// or restriction. A target with doNotDeploy is returned like any other: it
// selects the cluster, to deploy nothing there.
func Match(b *fleet.Bundle, c *fleet.Cluster, groups Groups) (*fleet.BundleTarget, error) {
	all, err := MatchAll(b, c, groups)
	if err != nil || len(all) == 0 {
		return nil, err
	}
	for _, t := range all {
		if t.DoNotDeploy {
			return t, nil
		}
	}
	return all[0], nil
}

// MatchAll returns the targets whose options the cluster takes, in order:
// the first that selects it (FirstMatch, the default), or every one that
// does (AllMatches; their options are laid over the Bundle's in this
// order). None when no target, or no restriction, selects the cluster.
func MatchAll(b *fleet.Bundle, c *fleet.Cluster, groups Groups) ([]*fleet.BundleTarget, error) {
	allowed, err := restrictionsAllow(b, c, groups)
	if err != nil || !allowed {
		return nil, err
	}
	var out []*fleet.BundleTarget
	for i := range b.Spec.Targets {
		t := &b.Spec.Targets[i]
		ok, err := selects(fmt.Sprintf("spec.targets[%d]", i), i, false, criteria(t), c, groups)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		out = append(out, t)
		if b.Spec.TargetCustomizationMode != fleet.TargetCustomizationModeAllMatches {
			break
		}
	}
	return out, nil
}

// restrictionsAllow reports whether the Bundle's targetRestrictions (an
// allow list fleet apply writes from a GitRepo's targets) let the cluster
// be targeted: always without restrictions, else when one selects it.
func restrictionsAllow(b *fleet.Bundle, c *fleet.Cluster, groups Groups) (bool, error) {
	if len(b.Spec.TargetRestrictions) == 0 {
		return true, nil
	}
	for i := range b.Spec.TargetRestrictions {
		r := &b.Spec.TargetRestrictions[i]
		ok, err := selects(fmt.Sprintf("spec.targetRestrictions[%d]", i), i, true, selection{r.ClusterName, r.ClusterSelector, r.ClusterGroup, r.ClusterGroupSelector}, c, groups)
		if err != nil || ok {
			return ok, err
		}
	}
	return false, nil
}

// selection is what a target or a restriction selects clusters by.
type selection struct {
	clusterName          string
	clusterSelector      *metav1.LabelSelector
	clusterGroup         string
	clusterGroupSelector *metav1.LabelSelector
}

func criteria(t *fleet.BundleTarget) selection {
	return selection{t.ClusterName, t.ClusterSelector, t.ClusterGroup, t.ClusterGroupSelector}
}

// selects reports whether s selects the cluster; field names the target or
// restriction in errors, index and restriction say which in a
// *MissingGroupsError.
func selects(field string, index int, restriction bool, s selection, c *fleet.Cluster, groups Groups) (bool, error) {
	t := &s
	if t.clusterName == "" && t.clusterSelector == nil && t.clusterGroup == "" && t.clusterGroupSelector == nil {
		return false, nil
	}
	if t.clusterName != "" && t.clusterName != c.Name {
		return false, nil
	}
	if t.clusterSelector != nil {
		ok, err := labelsMatch(t.clusterSelector, c.Labels)
		if err != nil {
			return false, fmt.Errorf("%s.clusterSelector: %w", field, err)
		}
		if !ok {
			return false, nil
		}
	}
	if t.clusterGroup == "" && t.clusterGroupSelector == nil {
		return true, nil
	}
	if groups.Given {
		switch {
		case t.clusterGroup != "" && !slices.ContainsFunc(groups.Items, func(g fleet.ClusterGroup) bool { return g.Name == t.clusterGroup }):
			return false, &MissingGroupsError{Target: index, Restriction: restriction, Group: t.clusterGroup}
		case t.clusterGroup == "" && len(groups.Items) == 0:
			return false, &MissingGroupsError{Target: index, Restriction: restriction}
		}
	}
	for j := range groups.Items {
		g := &groups.Items[j]
		if t.clusterGroup != "" && g.Name != t.clusterGroup {
			continue
		}
		if t.clusterGroupSelector != nil {
			ok, err := labelsMatch(t.clusterGroupSelector, g.Labels)
			if err != nil {
				return false, fmt.Errorf("%s.clusterGroupSelector: %w", field, err)
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
			return false, fmt.Errorf("%s: ClusterGroup %s: spec.selector: %w", field, g.Name, err)
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
	if len(b.Spec.TargetRestrictions) > 0 {
		return fmt.Sprintf("no target of Bundle %s selects cluster %s, or its targetRestrictions leave it out: the controller deploys nothing to it", b.Name, c.Name)
	}
	return fmt.Sprintf("no target of Bundle %s selects cluster %s: the controller deploys nothing to it", b.Name, c.Name)
}
