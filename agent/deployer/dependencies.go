package deployer

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller/summary"
	"github.com/gitops-fleet/fleet/internal/reconciler"
)

// dependencyRetry is how soon a BundleDeployment waiting for its
// dependencies is looked at again; the watch on the cluster namespace's
// BundleDeployments (dependentsOf) usually comes first.
const dependencyRetry = 15 * time.Second

// Condition reasons of the dependency check (defined with the API).
const (
	WaitingForDependencyReason = fleet.WaitingForDependencyReason
	DependencyCycleReason      = fleet.DependencyCycleReason
)

// checkDependencies decides whether a new deployment of bd may be applied:
// every Bundle that spec.dependsOn names must be deployed to this cluster
// (a BundleDeployment in the same cluster namespace, from a Bundle of the
// same workspace) and in one of the accepted states (default Ready), as
// summary.State derives them, the state the Bundle's status counts. It
// reads only the BundleDeployments of the agent's own cluster namespace
// (its cache), which the agent may read anyway.
//
// Not satisfied: a *reconciler.Waiting (WaitingForDependency) naming what
// it waits for. Waiting that would never end because the dependencies lead
// back to bd: a *reconciler.Stalled (DependencyCycle) naming the cycle. A
// selector that is not a valid label selector: a *reconciler.Stalled
// (ApplyFailed). A ref with neither name nor selector is skipped, as Fleet
// does.
func (d *Deployer) checkDependencies(ctx context.Context, bd *fleet.BundleDeployment) error {
	if len(bd.Spec.DependsOn) == 0 {
		return nil
	}
	list := &fleet.BundleDeploymentList{}
	if err := d.up.List(ctx, list, client.InNamespace(bd.Namespace)); err != nil {
		return fmt.Errorf("listing the BundleDeployments of %s for dependsOn: %w", bd.Namespace, err)
	}
	return dependencyOutcome(bd, list.Items)
}

// dependencyOutcome is checkDependencies on a listed cluster namespace.
func dependencyOutcome(bd *fleet.BundleDeployment, all []fleet.BundleDeployment) error {
	g := dependencyGraph{all: all}
	waits, err := g.waits(bd)
	if err != nil {
		return reconciler.Stall(fleet.ApplyFailedReason, "%v", err)
	}
	if len(waits) == 0 {
		return nil
	}
	if cycle := g.cycleThrough(bd); cycle != nil {
		return reconciler.Stall(DependencyCycleReason,
			"dependsOn forms a cycle on this cluster: %s; nothing is applied until one of these Bundles stops depending on the next",
			strings.Join(cycle, " → "))
	}
	names := make([]string, 0, len(waits))
	details := make([]string, 0, len(waits))
	for _, w := range waits {
		names = append(names, w.name)
		details = append(details, w.detail)
	}
	// Fleet's message, then what each one is missing.
	return reconciler.Wait(WaitingForDependencyReason, dependencyRetry,
		"dependent bundle(s) are not ready: [%s]: %s", strings.Join(names, " "), strings.Join(details, "; "))
}

// wait is one dependency not satisfied.
type wait struct {
	name   string // Bundle name, or the selector when nothing matches it
	detail string
}

// dependencyGraph resolves dependsOn within one cluster namespace.
type dependencyGraph struct {
	all []fleet.BundleDeployment
}

// matches returns the BundleDeployments ref selects for bd: those of
// Bundles of bd's workspace (the bundle-namespace label) whose labels (the
// Bundle's, copied by the controller, with fleet.cattle.io/bundle-name)
// match the selector and the name. ok is false for a ref with neither
// name nor selector.
func (g dependencyGraph) matches(bd *fleet.BundleDeployment, ref fleet.BundleRef) (out []*fleet.BundleDeployment, sel labels.Selector, ok bool, err error) {
	if ref.Name == "" && ref.Selector == nil {
		return nil, nil, false, nil
	}
	ls := &metav1.LabelSelector{}
	if ref.Selector != nil {
		ls = ref.Selector.DeepCopy()
	}
	if ref.Name != "" {
		ls = metav1.AddLabelToSelector(ls, fleet.BundleLabel, ref.Name)
	}
	sel, err = metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		return nil, nil, true, err
	}
	ws := bd.Labels[fleet.BundleNamespaceLabel]
	for i := range g.all {
		o := &g.all[i]
		if o.Labels[fleet.BundleNamespaceLabel] == ws && sel.Matches(labels.Set(o.Labels)) {
			out = append(out, o)
		}
	}
	return out, sel, true, nil
}

// waits lists bd's dependencies that are missing on this cluster or not in
// an accepted state.
func (g dependencyGraph) waits(bd *fleet.BundleDeployment) ([]wait, error) {
	var out []wait
	for i, ref := range bd.Spec.DependsOn {
		deps, sel, ok, err := g.matches(bd, ref)
		switch {
		case err != nil:
			return nil, fmt.Errorf("dependsOn[%d].selector is not a valid label selector (fix the Bundle's dependsOn): %v", i, err)
		case !ok:
			continue
		case len(deps) == 0 && ref.Name != "" && ref.Selector == nil:
			out = append(out, wait{name: ref.Name, detail: fmt.Sprintf("%s is not deployed to this cluster", ref.Name)})
			continue
		case len(deps) == 0:
			out = append(out, wait{name: sel.String(), detail: fmt.Sprintf("no Bundle matching %q is deployed to this cluster", sel.String())})
			continue
		}
		accepted := ref.AcceptedStates
		if len(accepted) == 0 {
			accepted = []fleet.BundleState{fleet.Ready}
		}
		for _, dep := range deps {
			if st := summary.State(dep); !slices.Contains(accepted, st) {
				out = append(out, wait{name: bundleName(dep), detail: fmt.Sprintf("%s is %s (accepted: %s)", bundleName(dep), st, joinStates(accepted))})
			}
		}
	}
	return out, nil
}

// cycleThrough returns a path of Bundle names from bd back to itself
// through dependsOn ("a", "b", "a"), or nil.
func (g dependencyGraph) cycleThrough(bd *fleet.BundleDeployment) []string {
	visited := map[string]bool{}
	var path []string
	var visit func(n *fleet.BundleDeployment) bool
	visit = func(n *fleet.BundleDeployment) bool {
		path = append(path, bundleName(n))
		for _, ref := range n.Spec.DependsOn {
			deps, _, _, err := g.matches(n, ref)
			if err != nil {
				continue
			}
			for _, dep := range deps {
				if dep.Name == bd.Name {
					path = append(path, bundleName(dep))
					return true
				}
				if visited[dep.Name] {
					continue
				}
				visited[dep.Name] = true
				if visit(dep) {
					return true
				}
			}
		}
		path = path[:len(path)-1]
		return false
	}
	if visit(bd) {
		return path
	}
	return nil
}

func bundleName(bd *fleet.BundleDeployment) string {
	if n := bd.Labels[fleet.BundleLabel]; n != "" {
		return n
	}
	return bd.Name
}

func joinStates(s []fleet.BundleState) string {
	out := make([]string, 0, len(s))
	for _, st := range s {
		out = append(out, string(st))
	}
	return strings.Join(out, ", ")
}

// waitsForDependencies reports whether bd has dependencies and a deployment
// not applied yet, or reported a dependency wait or cycle: what a change of
// another BundleDeployment may unblock.
func waitsForDependencies(bd *fleet.BundleDeployment) bool {
	if len(bd.Spec.DependsOn) == 0 {
		return false
	}
	if bd.Spec.DeploymentID != bd.Status.AppliedDeploymentID {
		return true
	}
	c := meta.FindStatusCondition(bd.Status.Conditions, fleet.DeployedCondition)
	return c != nil && (c.Reason == WaitingForDependencyReason || c.Reason == DependencyCycleReason)
}

// dependentsOf maps a BundleDeployment that changed to the others of its
// cluster namespace that may be waiting for it.
func (d *Deployer) dependentsOf(ctx context.Context, o client.Object) []reconcile.Request {
	list := &fleet.BundleDeploymentList{}
	if err := d.up.List(ctx, list, client.InNamespace(o.GetNamespace())); err != nil {
		d.log.Error(err, "listing BundleDeployments to wake those that depend on one", "changed", o.GetName())
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		bd := &list.Items[i]
		if bd.Name != o.GetName() && waitsForDependencies(bd) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(bd)})
		}
	}
	return out
}

// dependencyChanged passes the BundleDeployment changes a dependent may
// care about: creation, deletion, another state (its status), other labels
// (what selectors match) or another spec (a dependsOn that may close or
// break a cycle).
func dependencyChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*fleet.BundleDeployment)
			n, ok2 := e.ObjectNew.(*fleet.BundleDeployment)
			if !ok1 || !ok2 {
				return false
			}
			return summary.State(o) != summary.State(n) || !maps.Equal(o.Labels, n.Labels) || o.Generation != n.Generation
		},
	}
}
