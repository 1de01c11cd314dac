package deployer

import (
	"fmt"
	"maps"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/reconciler"
)

const (
	// PruneAnnotation set to PruneDisabled on an object keeps it downstream
	// when it leaves its bundle or its BundleDeployment is deleted. The
	// deployer sets it on the namespaces it creates for defaultNamespace and
	// namespace: other bundles and workloads may live there.
	PruneAnnotation = "fleet.cattle.io/prune"
	PruneDisabled   = "disabled"

	defaultNamespace = "default"
)

// prepared is a bundle made ready to apply.
type prepared struct {
	// objects are the bundle's objects, with namespaces and owner labels
	// set; they form the inventory.
	objects []*unstructured.Unstructured
	// namespace is the namespace object made for defaultNamespace or
	// namespace when the bundle holds none: applied when it is missing or
	// namespaceLabels/namespaceAnnotations are set, never pruned, not part
	// of the inventory.
	namespace *unstructured.Unstructured
	// namespaceMeta is set when the options label or annotate the namespace.
	namespaceMeta bool
}

// all returns what to apply; withNamespace includes the made namespace.
func (p *prepared) all(withNamespace bool) []*unstructured.Unstructured {
	out := make([]*unstructured.Unstructured, 0, len(p.objects)+1)
	if p.namespace != nil && withNamespace {
		out = append(out, p.namespace.DeepCopy())
	}
	for _, o := range p.objects {
		out = append(out, o.DeepCopy())
	}
	return out
}

func (p *prepared) refs() []objRef {
	out := make([]objRef, 0, len(p.objects))
	for _, o := range p.objects {
		out = append(out, refOf(o))
	}
	return out
}

// prepareObjects applies the BundleDeployment options to decoded objects:
// defaultNamespace on namespaced objects without one, namespace forced on
// all namespaced objects, cluster-scoped objects without a namespace,
// namespaceLabels/namespaceAnnotations on the target namespace (made when
// the bundle has none), and ownership labels. A kind is namespaced as the
// cluster's RESTMapper says, or, for a kind the cluster does not serve yet,
// as a CustomResourceDefinition in the same bundle says; any other kind is
// an error naming the object, retried (its CRD may yet be installed
// downstream). A bundle that cannot be applied as it is (an object without
// kind or name, an object twice) is a *reconciler.Stalled: its author must
// act.
func prepareObjects(objs []*unstructured.Unstructured, opts fleet.BundleDeploymentOptions, mapper meta.RESTMapper, setOwner func([]*unstructured.Unstructured)) (*prepared, error) {
	crdScopes := map[schema.GroupKind]bool{}
	for _, o := range objs {
		if o.GetKind() != "CustomResourceDefinition" || o.GroupVersionKind().Group != "apiextensions.k8s.io" {
			continue
		}
		group, _, _ := unstructured.NestedString(o.Object, "spec", "group")
		kind, _, _ := unstructured.NestedString(o.Object, "spec", "names", "kind")
		scope, _, _ := unstructured.NestedString(o.Object, "spec", "scope")
		crdScopes[schema.GroupKind{Group: group, Kind: kind}] = scope == "Namespaced"
	}

	p := &prepared{}
	seen := map[string]bool{}
	for i, in := range objs {
		o := in.DeepCopy()
		gvk := o.GroupVersionKind()
		if gvk.Kind == "" || gvk.Version == "" || o.GetName() == "" {
			return nil, reconciler.Stall(fleet.ApplyFailedReason, "object %d of the bundle (%s %q) has no apiVersion, kind or name", i+1, o.GetKind(), o.GetName())
		}
		namespaced, err := isNamespaced(gvk, mapper, crdScopes)
		if err != nil {
			if meta.IsNoMatchError(err) {
				return nil, fmt.Errorf("%s %s (apiVersion %s): the cluster does not serve this kind and no CustomResourceDefinition in the bundle defines it", gvk.Kind, nameOf(o), o.GetAPIVersion())
			}
			return nil, fmt.Errorf("looking up kind %s: %w", gvk, err)
		}
		switch {
		case !namespaced:
			o.SetNamespace("")
		case opts.TargetNamespace != "":
			o.SetNamespace(opts.TargetNamespace)
		case o.GetNamespace() == "" && opts.DefaultNamespace != "":
			o.SetNamespace(opts.DefaultNamespace)
		case o.GetNamespace() == "":
			o.SetNamespace(defaultNamespace)
		}
		k := refOf(o).key()
		if seen[k] {
			return nil, reconciler.Stall(fleet.ApplyFailedReason, "%s %s appears twice in the bundle", gvk.Kind, nameOf(o))
		}
		seen[k] = true
		p.objects = append(p.objects, o)
	}

	target := opts.TargetNamespace
	if target == "" {
		target = opts.DefaultNamespace
	}
	var nsObj *unstructured.Unstructured
	if target != "" {
		for _, o := range p.objects {
			if o.GetKind() == "Namespace" && o.GroupVersionKind().Group == "" && o.GetName() == target {
				nsObj = o
			}
		}
	}
	if target != "" && target != defaultNamespace && nsObj == nil {
		nsObj = &unstructured.Unstructured{}
		nsObj.SetAPIVersion("v1")
		nsObj.SetKind("Namespace")
		nsObj.SetName(target)
		nsObj.SetAnnotations(map[string]string{PruneAnnotation: PruneDisabled})
		p.namespace = nsObj
	}
	p.namespaceMeta = len(opts.NamespaceLabels) > 0 || len(opts.NamespaceAnnotations) > 0
	if nsObj != nil {
		if len(opts.NamespaceLabels) > 0 {
			l := nsObj.GetLabels()
			if l == nil {
				l = map[string]string{}
			}
			maps.Copy(l, opts.NamespaceLabels)
			nsObj.SetLabels(l)
		}
		if len(opts.NamespaceAnnotations) > 0 {
			a := nsObj.GetAnnotations()
			if a == nil {
				a = map[string]string{}
			}
			maps.Copy(a, opts.NamespaceAnnotations)
			nsObj.SetAnnotations(a)
		}
	}
	setOwner(p.objects)
	return p, nil
}

func isNamespaced(gvk schema.GroupVersionKind, mapper meta.RESTMapper, crdScopes map[schema.GroupKind]bool) (bool, error) {
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err == nil {
		return m.Scope.Name() == meta.RESTScopeNameNamespace, nil
	}
	if namespaced, ok := crdScopes[gvk.GroupKind()]; ok && meta.IsNoMatchError(err) {
		return namespaced, nil
	}
	return false, err
}

func nameOf(o *unstructured.Unstructured) string {
	if o.GetNamespace() == "" {
		return o.GetName()
	}
	return o.GetNamespace() + "/" + o.GetName()
}
