package deployer

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/reconciler"
)

// This file holds the namespace and CRD lifecycle options of a
// BundleDeployment: createNamespace, deleteNamespace, deleteCRDResources.

const (
	// NamespaceMissingReason: createNamespace is false and the target
	// namespace does not exist downstream; nothing was applied.
	NamespaceMissingReason = "NamespaceMissing"
	// NamespaceProtectedReason: deleteNamespace names a namespace the
	// agent never deletes (its own, a system one); nothing was applied.
	NamespaceProtectedReason = "NamespaceProtected"
)

// protectedNamespaces are never deleted for deleteNamespace: Kubernetes'
// own and Fleet's (the list Fleet itself skips), besides the agent's own
// namespace and every kube-* one.
var protectedNamespaces = []string{
	"default", "kube-system", "kube-public", "kube-node-lease",
	"fleet-local", "fleet-default", "cattle-fleet-system", "cattle-fleet-clusters-system",
	"cattle-fleet-local-system", "cattle-impersonation-system", "cattle-system",
}

// targetNamespace is the namespace the options deploy into: namespace,
// else defaultNamespace, else "default".
func targetNamespace(opts fleet.BundleDeploymentOptions) string {
	switch {
	case opts.TargetNamespace != "":
		return opts.TargetNamespace
	case opts.DefaultNamespace != "":
		return opts.DefaultNamespace
	}
	return defaultNamespace
}

// namespaceProtected says why a namespace is never deleted downstream, or
// "" when it may be.
func (d *Deployer) namespaceProtected(ns string) string {
	switch {
	case ns == d.opts.AgentNamespace:
		return "it is the agent's own namespace"
	case strings.HasPrefix(ns, "kube-") || slices.Contains(protectedNamespaces, ns):
		return "it is a system namespace"
	}
	return ""
}

// checkNamespaceLifecycle refuses, before anything is applied, a
// deployment whose target namespace must exist but does not
// (createNamespace: false; a *reconciler.Waiting, looked at again every
// resync: only a downstream admin can make it), or that asks to delete a
// namespace the agent never deletes (a *reconciler.Stalled: the Bundle
// must change).
func (d *Deployer) checkNamespaceLifecycle(ctx context.Context, bd *fleet.BundleDeployment, p *prepared) error {
	opts := bd.Spec.Options
	ns := targetNamespace(opts)
	if opts.DeleteNamespace && !opts.KeepResources {
		if why := d.namespaceProtected(ns); why != "" {
			return reconciler.Stall(NamespaceProtectedReason, "deleteNamespace: namespace %s is never deleted, %s: remove deleteNamespace or deploy into a namespace of the bundle's own", ns, why)
		}
	}
	if opts.CreateNamespace == nil || *opts.CreateNamespace || p.namespace == nil {
		return nil // created when missing, or the bundle brings its own
	}
	err := d.local.Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{})
	switch {
	case apierrors.IsNotFound(err):
		return reconciler.Wait(NamespaceMissingReason, d.opts.ResyncInterval, "namespace %s does not exist downstream and createNamespace is false: create it, or remove createNamespace: false", ns)
	case err != nil:
		return fmt.Errorf("reading namespace %s: %w", ns, err)
	}
	return nil
}

// prunable leaves out the CustomResourceDefinitions of refs unless
// deleteCRDs is set: a CRD's deletion deletes every object of its kind,
// whoever made them, so CRDs stay downstream by default when they leave
// the bundle or the BundleDeployment is deleted (as Helm keeps the CRDs
// Fleet marks with its keep policy).
func prunable(ctx context.Context, refs []objRef, deleteCRDs bool) []objRef {
	if deleteCRDs {
		return refs
	}
	var out, kept []objRef
	for _, r := range refs {
		if r.Kind == "CustomResourceDefinition" && strings.HasPrefix(r.APIVersion, "apiextensions.k8s.io/") {
			kept = append(kept, r)
			continue
		}
		out = append(out, r)
	}
	if len(kept) > 0 {
		names := make([]string, 0, len(kept))
		for _, r := range kept {
			names = append(names, r.Name)
		}
		ctrl.LoggerFrom(ctx).Info("keeping CustomResourceDefinitions (deleteCRDResources is not set)", "crds", names)
	}
	return out
}

// deleteNamespace deletes, as id, the target namespace of a deleted
// BundleDeployment that asked for it (inventory.DeleteNamespace), unless
// it is protected or another BundleDeployment of this agent still deploys
// into it. A namespace already gone counts as deleted.
func (d *Deployer) deleteNamespace(ctx context.Context, id *identity, inv *inventory) error {
	ns := inv.Namespace
	if !inv.DeleteNamespace || inv.KeepResources || ns == "" {
		return nil
	}
	log := ctrl.LoggerFrom(ctx)
	if why := d.namespaceProtected(ns); why != "" {
		log.Info("not deleting namespace", "namespace", ns, "why", why)
		return nil
	}
	others, err := d.inv.list(ctx)
	if err != nil {
		return fmt.Errorf("listing inventories before deleting namespace %s: %w", ns, err)
	}
	for _, name := range others {
		if name == inv.BundleDeployment {
			continue
		}
		o, err := d.inv.get(ctx, name)
		if err != nil {
			return err
		}
		if o != nil && o.usesNamespace(ns) {
			log.Info("not deleting namespace: another bundle deploys into it", "namespace", ns, "bundleDeployment", name)
			return nil
		}
	}
	obj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	if err := id.c.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting namespace %s (deleteNamespace) as %s: %w", ns, id.name(d.opts.AgentNamespace), err)
	}
	log.Info("deleted namespace (deleteNamespace)", "namespace", ns, "as", id.name(d.opts.AgentNamespace))
	return nil
}

// usesNamespace reports whether the inventory's deployment targets ns or
// holds objects in it.
func (inv *inventory) usesNamespace(ns string) bool {
	return inv.Namespace == ns || slices.ContainsFunc(inv.Resources, func(r objRef) bool { return r.Namespace == ns })
}

// forceApply is whether immutable-field changes are applied by deleting
// and recreating the object: helm.force, or correctDrift.force while
// correcting drift.
func forceApply(opts fleet.BundleDeploymentOptions, correct *fleet.CorrectDrift) bool {
	return correct != nil && correct.Force || opts.Helm != nil && opts.Helm.Force
}
