package uninstall

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gitops-fleet/fleet/internal/registration"
)

// kind is one resource the uninstall lists and deletes.
type kind struct {
	gvk      schema.GroupVersionKind
	resource string // plural, for access checks and messages
}

func (k kind) String() string {
	if k.gvk.Group == "" {
		return k.resource
	}
	return k.resource + "." + k.gvk.Group
}

func k(group, version, kindName, resource string) kind {
	return kind{gvk: schema.GroupVersionKind{Group: group, Version: version, Kind: kindName}, resource: resource}
}

const fleetGroup = "fleet.cattle.io"

var (
	kindToken        = k(fleetGroup, "v1alpha1", "ClusterRegistrationToken", "clusterregistrationtokens")
	kindCluster      = k(fleetGroup, "v1alpha1", "Cluster", "clusters")
	kindBundle       = k(fleetGroup, "v1alpha1", "Bundle", "bundles")
	kindGroup        = k(fleetGroup, "v1alpha1", "ClusterGroup", "clustergroups")
	kindRollout      = k(fleetGroup, "v1alpha1", "AgentRollout", "agentrollouts")
	kindRegistration = k(fleetGroup, "v1alpha1", "ClusterRegistration", "clusterregistrations")
	kindDeployment   = k(fleetGroup, "v1alpha1", "BundleDeployment", "bundledeployments")
	kindGitRepo      = k(fleetGroup, "v1alpha1", "GitRepo", "gitrepos")
	kindRestriction  = k(fleetGroup, "v1alpha1", "GitRepoRestriction", "gitreporestrictions")

	kindCRD            = k("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions")
	kindAPIService     = k("apiregistration.k8s.io", "v1", "APIService", "apiservices")
	kindPolicy         = k("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicy", "validatingadmissionpolicies")
	kindPolicyBinding  = k("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicyBinding", "validatingadmissionpolicybindings")
	kindNamespace      = k("", "v1", "Namespace", "namespaces")
	kindConfigMap      = k("", "v1", "ConfigMap", "configmaps")
	kindSecret         = k("", "v1", "Secret", "secrets")
	kindPod            = k("", "v1", "Pod", "pods")
	kindDeploymentApps = k("apps", "v1", "Deployment", "deployments")
)

// fleetObjectKinds are the fleet kinds other than Clusters and tokens, which
// go first: what is left once the Clusters are gone. AgentRollouts are not
// among them: the running controller records one for the current agent
// revision whenever there is none, so they go once it has stopped.
// GitRepos are among them for the plan and the rights, and are deleted
// before the Clusters (step 1: the source component would write their
// Bundles again).
var fleetObjectKinds = []kind{kindGitRepo, kindRestriction, kindBundle, kindGroup, kindRegistration, kindDeployment}

// labelledKinds are the kinds of everything the charts render and the
// controller and agent make at runtime outside the fleet kinds; fleet's are
// found by the labels in fleetSelectors. Workloads first, so nothing
// running makes more while the rest goes.
var labelledKinds = []kind{
	kindDeploymentApps,
	kindAPIService,
	k("", "v1", "Service", "services"),
	k("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets"),
	k("networking.k8s.io", "v1", "NetworkPolicy", "networkpolicies"),
	k("", "v1", "ServiceAccount", "serviceaccounts"),
	kindConfigMap,
	kindSecret,
	k("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings"),
	k("rbac.authorization.k8s.io", "v1", "Role", "roles"),
	k("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings"),
	k("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles"),
	k("scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses"),
}

// fleetSelectors are the labels that mark an object as fleet's: every object
// of charts/fleet and charts/fleet-agent (and kustomize/base/rbac); every
// object the controller generates (the local cluster's kubeconfig Secret,
// token and identity RBAC, pushed agent namespaces); the agent's
// impersonators. A user's own objects carry none of them.
var fleetSelectors = []map[string]string{
	{"app.kubernetes.io/part-of": "fleet"},
	{"fleet.cattle.io/managed": "true"},
	{registration.ImpersonatorLabel: "true"},
}

// kubeNamespaces are never deleted, whatever their labels say.
var kubeNamespaces = []string{metav1.NamespaceSystem, metav1.NamespacePublic, metav1.NamespaceDefault, "kube-node-lease"}

// ref names one object.
type ref struct {
	kind      kind
	namespace string
	name      string
}

func (r ref) String() string {
	if r.namespace == "" {
		return r.kind.gvk.Kind + " " + r.name
	}
	return r.kind.gvk.Kind + " " + r.namespace + "/" + r.name
}

func (r ref) object() *metav1.PartialObjectMetadata {
	o := &metav1.PartialObjectMetadata{}
	o.SetGroupVersionKind(r.kind.gvk)
	o.SetNamespace(r.namespace)
	o.SetName(r.name)
	return o
}

// list returns the objects of kind k (every namespace) matching opts. A kind
// the API server does not serve (CRDs already gone, no aggregation layer)
// has none.
func list(ctx context.Context, c client.Client, k kind, opts ...client.ListOption) ([]ref, []metav1.PartialObjectMetadata, error) {
	l := &metav1.PartialObjectMetadataList{}
	l.SetGroupVersionKind(k.gvk.GroupVersion().WithKind(k.gvk.Kind + "List"))
	if err := c.List(ctx, l, opts...); err != nil {
		if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
			return nil, nil, nil
		}
		return nil, nil, fmt.Errorf("listing %s: %w", k, err)
	}
	refs := make([]ref, 0, len(l.Items))
	for _, o := range l.Items {
		refs = append(refs, ref{kind: k, namespace: o.Namespace, name: o.Name})
	}
	return refs, l.Items, nil
}

// labelled returns fleet's objects of kind k: those carrying one of
// fleetSelectors, once each.
func labelled(ctx context.Context, c client.Client, k kind) ([]ref, error) {
	seen := map[ref]bool{}
	var out []ref
	for _, sel := range fleetSelectors {
		refs, _, err := list(ctx, c, k, client.MatchingLabels(sel))
		if err != nil {
			return nil, err
		}
		for _, r := range refs {
			if !seen[r] {
				seen[r] = true
				out = append(out, r)
			}
		}
	}
	return out, nil
}

// deleteAll deletes refs; gone already is fine.
func deleteAll(ctx context.Context, c client.Client, refs []ref) error {
	var errs []error
	for _, r := range refs {
		if err := c.Delete(ctx, r.object(), client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil && !apierrors.IsNotFound(err) && !meta.IsNoMatchError(err) {
			errs = append(errs, fmt.Errorf("deleting %s: %w", r, err))
		}
	}
	return errors.Join(errs...)
}

// remaining returns those of refs that still exist.
func remaining(ctx context.Context, c client.Client, refs []ref) ([]ref, error) {
	var out []ref
	for _, r := range refs {
		err := c.Get(ctx, client.ObjectKey{Namespace: r.namespace, Name: r.name}, r.object())
		switch {
		case err == nil:
			out = append(out, r)
		case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		default:
			return nil, fmt.Errorf("reading %s: %w", r, err)
		}
	}
	return out, nil
}

// progress prints the uninstall's lines.
type progress struct {
	out   io.Writer
	start time.Time
}

func (p *progress) printf(format string, args ...any) {
	fmt.Fprintf(p.out, "[%3.0fs] "+format+"\n", append([]any{time.Since(p.start).Seconds()}, args...)...)
}

// PollInterval is how often the uninstall looks again at what it waits for.
var PollInterval = time.Second

// waitGone waits up to timeout until none of what list returns is left,
// printing what is left every 10 s. list is called anew each time, so
// objects made meanwhile (a Cluster the controller made again) are waited
// for and deleted too when again is set.
func waitGone(ctx context.Context, p *progress, what string, timeout time.Duration, list func() ([]ref, error), again func([]ref) error) ([]ref, error) {
	deadline := time.Now().Add(timeout)
	lastReport := time.Now()
	for {
		left, err := list()
		if err != nil {
			return nil, err
		}
		if len(left) == 0 {
			return nil, nil
		}
		if time.Now().After(deadline) {
			return left, nil
		}
		if time.Since(lastReport) >= 10*time.Second {
			p.printf("  waiting for %d %s: %s", len(left), what, names(left, 5))
			lastReport = time.Now()
		}
		if again != nil {
			if err := again(left); err != nil {
				return nil, err
			}
		}
		select {
		case <-ctx.Done():
			return left, ctx.Err()
		case <-time.After(PollInterval):
		}
	}
}

// names lists at most n refs, and how many more.
func names(refs []ref, n int) string {
	s := make([]string, 0, n)
	for i, r := range refs {
		if i == n {
			return strings.Join(s, ", ") + fmt.Sprintf(" and %d more", len(refs)-n)
		}
		s = append(s, r.String())
	}
	return strings.Join(s, ", ")
}

// access is one right the uninstall needs.
type access struct {
	verb string
	kind kind
	// namespace "" is every namespace (or a cluster-scoped kind).
	namespace string
}

func (a access) String() string {
	if a.namespace == "" {
		return a.verb + " " + a.kind.String()
	}
	return a.verb + " " + a.kind.String() + " in " + a.namespace
}

// missingAccess asks the API server (SelfSubjectAccessReview) which of
// needs the caller lacks, so the uninstall refuses before deleting anything
// rather than stopping half way.
func missingAccess(ctx context.Context, c client.Client, needs []access) ([]string, error) {
	var missing []string
	for _, a := range needs {
		r := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: a.verb, Group: a.kind.gvk.Group, Resource: a.kind.resource, Namespace: a.namespace,
			},
		}}
		if err := c.Create(ctx, r); err != nil {
			return nil, fmt.Errorf("asking the API server what you may do: %w", err)
		}
		if !r.Status.Allowed {
			missing = append(missing, a.String())
		}
	}
	return missing, nil
}

// readWrite is list and delete on each kind, everywhere.
func readWrite(kinds ...kind) []access {
	var out []access
	for _, k := range kinds {
		out = append(out, access{verb: "list", kind: k}, access{verb: "delete", kind: k})
	}
	return out
}

func isKubeNamespace(name string) bool { return slices.Contains(kubeNamespaces, name) }
