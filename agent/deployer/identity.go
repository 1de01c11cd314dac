package deployer

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/fluxcd/pkg/ssa"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/apply"
	"github.com/gitops-fleet/fleet/internal/reconciler"
	"github.com/gitops-fleet/fleet/internal/scheme"
)

// This file holds who the deployer acts for and as: the cluster a
// BundleDeployment must be made for, and the downstream identity that
// applies its objects.

// clusterMismatch says why a BundleDeployment was not made for this agent's
// cluster, or "" when it was: the controller labels every BundleDeployment
// with the Cluster it targets (fleet.cattle.io/cluster) and that Cluster's
// workspace (fleet.cattle.io/cluster-namespace), and both must be the
// agent's own, as its credential names them. A missing label is a mismatch
// too: the controller always sets both.
func clusterMismatch(labels map[string]string, clusterNamespace, clusterName string) string {
	ns, nsOK := labels[fleet.ClusterNamespaceLabel]
	name, nameOK := labels[fleet.ClusterLabel]
	if nsOK && nameOK && ns == clusterNamespace && name == clusterName {
		return ""
	}
	show := func(v string, ok bool) string {
		if !ok {
			return "(none)"
		}
		return fmt.Sprintf("%q", v)
	}
	return fmt.Sprintf("not applied: this BundleDeployment is labelled for cluster %s in workspace %s (labels %s and %s), but this agent is cluster %q in workspace %q",
		show(name, nameOK), show(ns, nsOK), fleet.ClusterLabel, fleet.ClusterNamespaceLabel, clusterName, clusterNamespace)
}

// isAgentBundle reports whether a BundleDeployment, by its labels, is this
// cluster's own agent Bundle: marked fleet.AgentBundleLabel (which the
// controller passes on only from the agent Bundle it made for the Cluster,
// never from a user's Bundle) and labelled for this agent's cluster. Its
// name plays no part.
func isAgentBundle(labels map[string]string, clusterNamespace, clusterName string) bool {
	return labels[fleet.AgentBundleLabel] == "true" && clusterMismatch(labels, clusterNamespace, clusterName) == ""
}

// identity applies a BundleDeployment's objects downstream: the agent
// itself, or a ServiceAccount it impersonates.
type identity struct {
	// serviceAccount is the impersonated ServiceAccount's name in the
	// agent's namespace; "" for the agent itself.
	serviceAccount string
	// c reads (health, prune checks) and rm writes (apply, dry run, diff,
	// prune) as this identity.
	c  client.Client
	rm *ssa.ResourceManager
}

// impersonated reports whether the identity is a ServiceAccount.
func (id *identity) impersonated() bool { return id.serviceAccount != "" }

// name is "serviceaccount <ns>/<name>" or "the agent", for messages.
func (id *identity) name(agentNamespace string) string {
	if !id.impersonated() {
		return "the agent"
	}
	return "serviceaccount " + agentNamespace + "/" + id.serviceAccount
}

// impersonators caches one client per ServiceAccount: made on first use,
// dropped when the ServiceAccount is found missing. The ServiceAccounts
// live in the agent's namespace, which only the downstream cluster's admins
// write, so the cache cannot grow beyond what they made.
type impersonators struct {
	mu     sync.Mutex
	byName map[string]*identity
}

// identityFor returns who applies a bundle with the given serviceAccount
// option. The ServiceAccount is looked up in the agent's namespace (Fleet's
// rule: a Bundle author can name only ServiceAccounts the downstream admin
// put next to the agent, never one of an application namespace). A missing
// one is a *reconciler.Waiting (ServiceAccountMissing): only a downstream
// admin can make it, and nothing tells the agent when they did, so it is
// looked for again at every resync. An invalid name is a
// *reconciler.Stalled: the Bundle's author must act.
func (d *Deployer) identityFor(ctx context.Context, serviceAccount string) (*identity, error) {
	if serviceAccount == "" {
		return d.self, nil
	}
	if errs := validation.IsDNS1123Subdomain(serviceAccount); len(errs) > 0 {
		return nil, reconciler.Stall(fleet.ApplyFailedReason, "serviceAccount %q is not a valid ServiceAccount name: %s", serviceAccount, strings.Join(errs, "; "))
	}
	ns := d.opts.AgentNamespace
	err := d.local.Get(ctx, client.ObjectKey{Namespace: ns, Name: serviceAccount}, &corev1.ServiceAccount{})
	switch {
	case apierrors.IsNotFound(err):
		d.imp.mu.Lock()
		delete(d.imp.byName, serviceAccount)
		d.imp.mu.Unlock()
		return nil, reconciler.Wait(fleet.ServiceAccountMissingReason, d.resync(),
			"serviceaccount %s/%s, named by the bundle's serviceAccount, does not exist in this cluster: create it and give it RBAC for what the bundle holds, or remove serviceAccount from the Bundle; nothing was applied", ns, serviceAccount)
	case err != nil:
		return nil, fmt.Errorf("looking up serviceaccount %s/%s: %w", ns, serviceAccount, err)
	}
	d.imp.mu.Lock()
	defer d.imp.mu.Unlock()
	if id, ok := d.imp.byName[serviceAccount]; ok {
		return id, nil
	}
	cfg := rest.CopyConfig(d.opts.Local)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + ns + ":" + serviceAccount,
		// The groups the API server gives every token of the
		// ServiceAccount; it adds system:authenticated itself.
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns},
	}
	// The kinds and scopes come from the agent's own mapper: discovery is
	// the same for everyone, and one mapper for all identities saves a
	// discovery per ServiceAccount.
	c, err := client.New(cfg, client.Options{Scheme: scheme.Scheme, Mapper: d.local.RESTMapper()})
	if err != nil {
		return nil, fmt.Errorf("making a client for serviceaccount %s/%s: %w", ns, serviceAccount, err)
	}
	id := &identity{
		serviceAccount: serviceAccount,
		c:              c,
		rm:             apply.NewManager(c, apply.WithStatusReader(d.local)),
	}
	d.imp.byName[serviceAccount] = id
	return id, nil
}

// refused is a bundle the downstream API server refused to the
// impersonated ServiceAccount who (403), object by object: a
// *reconciler.Waiting (Forbidden), since only a downstream admin can grant
// what is missing and nothing tells the agent when they did, so it is
// tried again at every resync. outcome says what happened to the
// deployment.
func (d *Deployer) refused(who string, reasons []string, outcome string) *reconciler.Waiting {
	const show = 5
	more := ""
	if len(reasons) > show {
		more = fmt.Sprintf(" and %d more", len(reasons)-show)
		reasons = reasons[:show]
	}
	return reconciler.Wait(fleet.ForbiddenReason, d.resync(), "%s%s; %s: give %s get, create, patch and delete on what the bundle holds, or take those objects out of the bundle",
		strings.Join(reasons, "; "), more, outcome, who)
}
