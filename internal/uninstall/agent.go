package uninstall

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/registration"
)

// Agent uninstalls an agent from a downstream cluster: what `helm uninstall
// fleet-agent` or the controller's push made (labelled as fleet's), and what
// the agent made at runtime and helm leaves: its identity Secret (with the
// recovery token), its credential, its inventories, its direct endpoint's
// certificate and state, the impersonators of cluster access and their
// namespace; then its namespace.
type Agent struct {
	// Client is the caller's own identity in the downstream cluster
	// (cluster-admin).
	Client client.Client
	// Namespace is the agent's (default cattle-fleet-system). It is
	// deleted when it is cattle-fleet-system or fleet made it (labelled
	// fleet.cattle.io/managed); another namespace of your choosing stays,
	// without fleet's objects.
	Namespace string
	// DryRun lists what would go and changes nothing.
	DryRun bool
	// Timeout bounds the wait for the namespaces to go (default 5 minutes).
	Timeout time.Duration
	// Out receives the progress lines.
	Out io.Writer
}

// Run uninstalls the agent, printing each step. It refuses before changing
// anything when the caller lacks a right it needs.
func (a *Agent) Run(ctx context.Context) error {
	if a.Namespace == "" {
		a.Namespace = config.DefaultSystemNamespace
	}
	if a.Timeout == 0 {
		a.Timeout = 5 * time.Minute
	}
	out := a.Out
	if out == nil {
		out = io.Discard
	}
	p := &progress{out: out, start: time.Now()}

	needs := readWrite(labelledKinds...)
	needs = append(needs, readWrite(kindNamespace)...)
	if a.DryRun {
		var lists []access
		for _, n := range needs {
			if n.verb == "list" {
				lists = append(lists, n)
			}
		}
		needs = lists
	}
	if missing, err := missingAccess(ctx, a.Client, needs); err != nil {
		return err
	} else if len(missing) > 0 {
		return fmt.Errorf("you may not %s: uninstalling the agent needs cluster-admin rights on this cluster; nothing was changed", strings.Join(missing, ", "))
	}

	// The fleet controller's cluster holds fleet's objects beside its local
	// agent's: only `fleet uninstall` removes them in an order that leaves
	// nothing stuck.
	ctrls, _, err := list(ctx, a.Client, kindDeploymentApps, client.MatchingLabels(controllerLabels))
	if err != nil {
		return err
	}
	if len(ctrls) > 0 {
		return fmt.Errorf("this cluster runs the fleet controller (%s): run `fleet uninstall` against it, which removes its local agent too; nothing was changed", names(ctrls, 2))
	}

	objs, err := a.objects(ctx)
	if err != nil {
		return err
	}
	nss, err := a.namespaces(ctx)
	if err != nil {
		return err
	}
	verb := "uninstalling the agent"
	if a.DryRun {
		verb = "would delete (dry run, nothing is changed)"
	}
	p.printf("%s:", verb)
	for _, r := range objs {
		p.printf("    %s", r)
	}
	for _, r := range nss {
		p.printf("    %s, with everything in it", r)
	}
	if !a.DryRun && !a.deletesNamespace(nss) {
		p.printf("  namespace %s is not fleet's: it stays, without fleet's objects", a.Namespace)
	}
	if a.DryRun {
		return nil
	}
	if len(objs)+len(nss) == 0 {
		p.printf("no agent in this cluster")
		return nil
	}
	// The Deployment first (labelledKinds' order): a running agent would
	// make its identity and impersonators again.
	if err := deleteAll(ctx, a.Client, objs); err != nil {
		return err
	}
	p.printf("deleted the agent's objects; deleting namespaces %s", nsNames(nss))
	again := func() ([]ref, error) { return a.namespaces(ctx) }
	if err := deleteAll(ctx, a.Client, nss); err != nil {
		return err
	}
	left, err := waitGone(ctx, p, "namespaces", a.Timeout, again, nil)
	if err != nil {
		return err
	}
	if len(left) > 0 {
		return fmt.Errorf("after %s, namespaces %s are still being deleted; `kubectl get namespace -o yaml` shows what holds them", a.Timeout, nsNames(left))
	}
	p.printf("the agent is uninstalled from this cluster")
	return nil
}

func (a *Agent) deletesNamespace(nss []ref) bool {
	for _, r := range nss {
		if r.name == a.Namespace {
			return true
		}
	}
	return false
}

// objects are the agent's objects: labelled as fleet's anywhere, and in its
// namespace the Secrets and ConfigMaps it made at runtime.
func (a *Agent) objects(ctx context.Context) ([]ref, error) {
	var out []ref
	for _, k := range labelledKinds {
		refs, err := labelled(ctx, a.Client, k)
		if err != nil {
			return nil, err
		}
		out = append(out, refs...)
	}
	seen := map[ref]bool{}
	for _, r := range out {
		seen[r] = true
	}
	add := func(r ref) {
		if !seen[r] {
			seen[r] = true
			out = append(out, r)
		}
	}
	secrets := []string{registration.AgentCredentialSecretName, registration.BootstrapSecretName, registration.IdentitySecretName}
	for _, name := range secrets {
		s := &corev1.Secret{}
		err := a.Client.Get(ctx, client.ObjectKey{Namespace: a.Namespace, Name: name}, s)
		switch {
		case err == nil:
			add(ref{kind: kindSecret, namespace: a.Namespace, name: name})
		case !apierrors.IsNotFound(err):
			return nil, fmt.Errorf("reading Secret %s/%s: %w", a.Namespace, name, err)
		}
	}
	for _, k := range []kind{kindConfigMap, kindSecret} {
		for _, sel := range []map[string]string{{registration.InventoryLabel: "true"}, {registration.DirectLabel: "true"}} {
			refs, _, err := list(ctx, a.Client, k, client.InNamespace(a.Namespace), client.MatchingLabels(sel))
			if err != nil {
				return nil, err
			}
			for _, r := range refs {
				add(r)
			}
		}
	}
	return out, nil
}

// namespaces are the agent's namespace when it is fleet's, and the
// namespaces fleet made (the impersonators', a pushed agent's).
func (a *Agent) namespaces(ctx context.Context) ([]ref, error) {
	l := &corev1.NamespaceList{}
	if err := a.Client.List(ctx, l); err != nil {
		return nil, fmt.Errorf("listing namespaces: %w", err)
	}
	var out []ref
	for _, ns := range l.Items {
		byName := []string{config.DefaultSystemNamespace, registration.ImpersonationNamespace}
		if ns.Name == a.Namespace && ns.Name != config.DefaultSystemNamespace {
			byName = []string{registration.ImpersonationNamespace}
		}
		if isFleetNamespace(&ns, byName...) {
			out = append(out, ref{kind: kindNamespace, name: ns.Name})
		}
	}
	return out, nil
}
