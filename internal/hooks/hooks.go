// Package hooks gives Helm hooks and CRDs their meaning in the
// render-upstream, apply-downstream model: which apply phase an object
// belongs to, in which order the objects of a phase run, and how a hook is
// cleaned up. The renderer orders a Bundle's content with it and the agent
// runs the phases with it, so both read an object the same way; it links
// no Helm (the agent must not). The rules are Helm v4's
// (pkg/release/v1/util/manifest_sorter.go, kind_sorter.go,
// pkg/action/hooks.go), written here from their documented behaviour.
package hooks

import (
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gitops-fleet/fleet/internal/bundlecontent"
)

// Helm's hook annotations.
const (
	Annotation       = "helm.sh/hook"
	WeightAnnotation = "helm.sh/hook-weight"
	DeleteAnnotation = "helm.sh/hook-delete-policy"
)

// Delete policies (helm.sh/hook-delete-policy).
const (
	BeforeHookCreation = "before-hook-creation"
	HookSucceeded      = "hook-succeeded"
	HookFailed         = "hook-failed"
)

// events maps Helm's hook events to the phase they run in. Events with no
// phase (test hooks, rollback hooks: nothing here runs tests or rolls
// back) are known but never run.
var events = map[string]bundlecontent.Phase{
	"pre-install":   bundlecontent.PhasePreInstall,
	"pre-upgrade":   bundlecontent.PhasePreUpgrade,
	"post-install":  bundlecontent.PhasePostInstall,
	"post-upgrade":  bundlecontent.PhasePostUpgrade,
	"pre-delete":    bundlecontent.PhasePreDelete,
	"post-delete":   bundlecontent.PhasePostDelete,
	"pre-rollback":  "",
	"post-rollback": "",
	"test":          "",
	"test-success":  "", // Helm 2's name, still read by Helm
}

// Phases returns the phases an object is applied in: PhaseMain for an
// ordinary object, PhaseCRDs for a CustomResourceDefinition that is not a
// hook, and for a hook every phase its events name (a hook may name
// several). A hook whose events are only test or rollback events has no
// phase: it is never applied. So has a hook naming an event Helm does not
// know: Helm skips such an object whole, and so do we.
func Phases(o *unstructured.Unstructured) []bundlecontent.Phase {
	value, isHook := o.GetAnnotations()[Annotation]
	if !isHook {
		if isCRD(o) {
			return []bundlecontent.Phase{bundlecontent.PhaseCRDs}
		}
		return []bundlecontent.Phase{bundlecontent.PhaseMain}
	}
	var out []bundlecontent.Phase
	for e := range strings.SplitSeq(value, ",") {
		p, known := events[strings.ToLower(strings.TrimSpace(e))]
		if !known {
			return nil
		}
		if p != "" && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// IsHook says whether an object is a Helm hook.
func IsHook(o *unstructured.Unstructured) bool {
	_, ok := o.GetAnnotations()[Annotation]
	return ok
}

func isCRD(o *unstructured.Unstructured) bool {
	return o.GetKind() == "CustomResourceDefinition" && o.GroupVersionKind().Group == "apiextensions.k8s.io"
}

// Weight is a hook's helm.sh/hook-weight; 0 when absent or not an
// integer, as in Helm.
func Weight(o *unstructured.Unstructured) int {
	w, err := strconv.Atoi(o.GetAnnotations()[WeightAnnotation])
	if err != nil {
		return 0
	}
	return w
}

// DeletePolicies are a hook's helm.sh/hook-delete-policy values;
// before-hook-creation when it names none, as in Helm.
func DeletePolicies(o *unstructured.Unstructured) []string {
	var out []string
	for p := range strings.SplitSeq(o.GetAnnotations()[DeleteAnnotation], ",") {
		if p = strings.ToLower(strings.TrimSpace(p)); p != "" {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		out = []string{BeforeHookCreation}
	}
	return out
}

// HasDeletePolicy says whether a hook is deleted on the given occasion.
// CustomResourceDefinitions are never deleted as hooks (Helm's rule: it
// would delete every custom resource of the kind).
func HasDeletePolicy(o *unstructured.Unstructured, policy string) bool {
	return !isCRD(o) && slices.Contains(DeletePolicies(o), policy)
}

// installOrder is Helm's InstallOrder: kinds earlier in the list are
// installed first; kinds not in it come after, by kind name.
var installOrder = func() map[string]int {
	kinds := []string{
		"PriorityClass", "Namespace", "NetworkPolicy", "ResourceQuota", "LimitRange",
		"PodSecurityPolicy", "PodDisruptionBudget", "ServiceAccount", "Secret", "SecretList",
		"ConfigMap", "StorageClass", "PersistentVolume", "PersistentVolumeClaim",
		"CustomResourceDefinition", "ClusterRole", "ClusterRoleList", "ClusterRoleBinding",
		"ClusterRoleBindingList", "Role", "RoleList", "RoleBinding", "RoleBindingList",
		"Service", "DaemonSet", "Pod", "ReplicationController", "ReplicaSet", "Deployment",
		"HorizontalPodAutoscaler", "StatefulSet", "Job", "CronJob", "IngressClass", "Ingress",
		"APIService", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",
	}
	m := make(map[string]int, len(kinds))
	for i, k := range kinds {
		m[k] = i
	}
	return m
}()

// compareKinds is Helm's kind order: known kinds by
// InstallOrder, then unknown kinds by name.
func compareKinds(a, b string) int {
	ia, aok := installOrder[a]
	ib, bok := installOrder[b]
	switch {
	case aok && bok:
		return ia - ib
	case aok:
		return -1
	case bok:
		return 1
	default:
		return strings.Compare(a, b)
	}
}

// Compare orders the hooks of one phase as Helm runs them: by weight, then
// by name, then by kind order (Helm sorts hooks stably by kind first, then
// stably by weight and name, so kind only separates hooks of equal weight
// and name). Use it with a stable sort: Helm keeps the chart's order
// beyond that.
func Compare(a, b *unstructured.Unstructured) int {
	if wa, wb := Weight(a), Weight(b); wa != wb {
		return wa - wb
	}
	if c := strings.Compare(a.GetName(), b.GetName()); c != 0 {
		return c
	}
	return compareKinds(a.GetKind(), b.GetKind())
}
