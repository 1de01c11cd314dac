// Package uninstall removes fleet from a cluster, in the order that leaves
// nothing stuck: upstream (Upstream) the fleet objects while the controller
// still runs to clear their finalizers and remove the agents it pushed, then
// the controller, the cluster-wide parts and fleet's namespaces; downstream
// (Agent) an agent and what it made at runtime. `fleet uninstall` and the
// e2e suite run it. Only fleet's objects are deleted: the fleet kinds,
// objects labelled as fleet's (fleetSelectors), the admission policies
// fleet ships, and namespaces fleet made; a user's own namespaces and the
// objects in them without those labels stay.
package uninstall

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/kustomize/base/policies"
)

// FieldManager writes the uninstall's one update (the configuration that
// stops the controller making objects again).
const FieldManager = "fleet-uninstall"

// ControllerDeployment is the controller's Deployment in its namespace
// (with shards, fleet-controller-shard-<i>).
const ControllerDeployment = "fleet-controller"

// controllerLabels select the controller's Deployments and pods (the
// chart's fleet.labels).
var controllerLabels = map[string]string{"app.kubernetes.io/name": "fleet-controller", "app.kubernetes.io/part-of": "fleet"}

// Upstream uninstalls fleet from the upstream (management) cluster.
type Upstream struct {
	// Client is the caller's own identity (cluster-admin).
	Client client.Client
	// Namespace is the controller's (default cattle-fleet-system).
	Namespace string
	// KeepCRDs leaves the CustomResourceDefinitions (their objects go).
	KeepCRDs bool
	// DryRun lists what would go and changes nothing.
	DryRun bool
	// Timeout bounds each wait (default 5 minutes).
	Timeout time.Duration
	// Out receives the progress lines.
	Out io.Writer
}

// LeftAgent is a downstream cluster where an agent may still run after the
// uninstall: its Cluster is gone, so the agent can no longer reach the
// upstream, but nothing removed it there.
type LeftAgent struct {
	// Cluster is the deleted Cluster, namespace/name.
	Cluster string
	// Namespace is the agent's namespace downstream, when known.
	Namespace string
	// Why says why it was not removed.
	Why string
}

func (a LeftAgent) String() string {
	cmd := "fleet uninstall agent --kubeconfig <its kubeconfig>"
	if a.Namespace != "" && a.Namespace != config.DefaultSystemNamespace {
		cmd += " --namespace " + a.Namespace
	}
	return fmt.Sprintf("%s: %s; remove it there with `%s`", a.Cluster, a.Why, cmd)
}

// Result is what the uninstall leaves to the user.
type Result struct {
	// Agents are the downstream clusters that may still run an agent.
	Agents []LeftAgent
}

// plan is what fleet has in the cluster at the start.
type plan struct {
	tokens, clusters, objects, labelled, policies, crds, namespaces []ref
	clusterList                                                     []fleet.Cluster
}

func (p *plan) empty() bool {
	return len(p.tokens)+len(p.clusters)+len(p.objects)+len(p.labelled)+len(p.policies)+len(p.crds)+len(p.namespaces) == 0
}

// Run uninstalls, printing each step. It refuses before changing anything
// when the caller lacks a right it needs, or when objects carry finalizers
// and the controller that clears them does not run. An error after that
// names what is left and how to remove it; running it again continues.
func (u *Upstream) Run(ctx context.Context) (*Result, error) {
	if u.Namespace == "" {
		u.Namespace = config.DefaultSystemNamespace
	}
	if u.Timeout == 0 {
		u.Timeout = 5 * time.Minute
	}
	out := u.Out
	if out == nil {
		out = io.Discard
	}
	p := &progress{out: out, start: time.Now()}

	if missing, err := missingAccess(ctx, u.Client, u.needs()); err != nil {
		return nil, err
	} else if len(missing) > 0 {
		return nil, fmt.Errorf("you may not %s: uninstalling fleet needs cluster-admin rights on the upstream cluster; nothing was changed", strings.Join(missing, ", "))
	}
	pl, err := u.plan(ctx)
	if err != nil {
		return nil, err
	}
	u.printPlan(p, pl)
	if u.DryRun || pl.empty() {
		if pl.empty() {
			p.printf("nothing of fleet is left in this cluster")
		}
		return &Result{}, nil
	}
	if err := u.controllerRunsIfNeeded(ctx); err != nil {
		return nil, err
	}

	// 1. Nothing may come back: no local cluster made again, no Cluster
	// API cluster registered again, no agent registering with a token.
	if err := u.stopMaking(ctx, p); err != nil {
		return nil, err
	}
	if len(pl.tokens) > 0 {
		p.printf("deleting %d ClusterRegistrationTokens (no agent can register any more)", len(pl.tokens))
		if err := u.deleteKinds(ctx, p, kindToken); err != nil {
			return nil, err
		}
	}

	// GitRepos: the source component (fleet-gitops) makes no Bundle, nor
	// through the local agent a Cluster, again. Their Bundles and staged
	// Secrets are theirs (ownerReferences) and go with them.
	if _, gitRepos, err := list(ctx, u.Client, kindGitRepo); err != nil {
		return nil, err
	} else if len(gitRepos) > 0 {
		p.printf("deleting %d GitRepos (the source component writes no Bundle any more)", len(gitRepos))
		if err := u.deleteKinds(ctx, p, kindGitRepo); err != nil {
			return nil, err
		}
	}

	// 2. Clusters, while the controller runs: their finalizer removes the
	// agents the controller pushed, and everything made for each cluster.
	res := &Result{}
	if len(pl.clusters) > 0 {
		p.printf("deleting %d Clusters: the controller removes the agents it pushed, their namespaces and credentials", len(pl.clusters))
		start := time.Now()
		if err := u.deleteKinds(ctx, p, kindCluster); err != nil {
			return nil, err
		}
		agents, err := u.leftAgents(ctx, pl.clusterList, start)
		if err != nil {
			return nil, err
		}
		res.Agents = agents
	}

	// 3. The other fleet objects; their finalizers need the controller too.
	p.printf("deleting GitRepoRestrictions, Bundles, BundleDeployments, ClusterGroups and ClusterRegistrations")
	if err := u.deleteKinds(ctx, p, fleetObjectKinds...); err != nil {
		return nil, err
	}

	// 4. The controller, fleet-proxy, the renderer, fleet-gitops and the cluster-wide
	// parts: what `helm uninstall fleet` (or deleting the kustomize
	// install) removes, found by their labels, and the admission policies.
	p.printf("deleting the controller, fleet-proxy, the renderer, their RBAC, the APIService and the admission policies")
	for _, k := range labelledKinds {
		refs, err := labelled(ctx, u.Client, k)
		if err != nil {
			return nil, err
		}
		if err := deleteAll(ctx, u.Client, refs); err != nil {
			return nil, err
		}
	}
	pols, err := policyRefs()
	if err != nil {
		return nil, err
	}
	if err := deleteAll(ctx, u.Client, pols); err != nil {
		return nil, err
	}
	// The AgentRollouts, once the controller that records them has gone
	// (a terminating controller pod may record one more: deleted too).
	if err := u.deleteAndWait(ctx, p, "controller pods", func() ([]ref, error) { return u.controllerPods(ctx) }); err != nil {
		return nil, err
	}
	if err := u.deleteKinds(ctx, p, kindRollout); err != nil {
		return nil, err
	}

	// 5. The CRDs: nothing of their kinds is left, so nothing waits on a
	// finalizer.
	if !u.KeepCRDs {
		p.printf("deleting %d CustomResourceDefinitions", len(pl.crds))
		if err := u.deleteAndWait(ctx, p, "CustomResourceDefinitions", func() ([]ref, error) { return fleetCRDs(ctx, u.Client) }); err != nil {
			return nil, err
		}
	} else {
		p.printf("keeping the CustomResourceDefinitions (--keep-crds)")
	}

	// 6. fleet's namespaces, with the helm release's records, the
	// controller's Secrets and ConfigMaps, the registrations' credentials.
	p.printf("deleting namespaces %s", nsNames(pl.namespaces))
	if err := u.deleteAndWait(ctx, p, "namespaces", func() ([]ref, error) { return u.fleetNamespaces(ctx) }); err != nil {
		return nil, err
	}
	p.printf("fleet is uninstalled from this cluster")
	return res, nil
}

// needs are the rights Run uses.
func (u *Upstream) needs() []access {
	var needs []access
	if u.DryRun {
		for _, a := range u.writeNeeds() {
			if a.verb == "list" {
				needs = append(needs, a)
			}
		}
		return needs
	}
	return u.writeNeeds()
}

func (u *Upstream) writeNeeds() []access {
	needs := readWrite(kindToken, kindCluster)
	needs = append(needs, readWrite(append(fleetObjectKinds, kindRollout)...)...)
	needs = append(needs, readWrite(kindPod)...)
	needs = append(needs, readWrite(labelledKinds...)...)
	needs = append(needs, readWrite(kindPolicy, kindPolicyBinding, kindCRD, kindNamespace)...)
	needs = append(needs, access{verb: "update", kind: kindConfigMap, namespace: u.Namespace})
	return needs
}

func (u *Upstream) plan(ctx context.Context) (*plan, error) {
	pl := &plan{}
	var err error
	if pl.tokens, _, err = list(ctx, u.Client, kindToken); err != nil {
		return nil, err
	}
	if pl.clusters, _, err = list(ctx, u.Client, kindCluster); err != nil {
		return nil, err
	}
	if len(pl.clusters) > 0 {
		l := &fleet.ClusterList{}
		if err := u.Client.List(ctx, l); err != nil {
			return nil, fmt.Errorf("listing Clusters: %w", err)
		}
		pl.clusterList = l.Items
	}
	for _, k := range append(fleetObjectKinds, kindRollout) {
		refs, _, err := list(ctx, u.Client, k)
		if err != nil {
			return nil, err
		}
		pl.objects = append(pl.objects, refs...)
	}
	for _, k := range labelledKinds {
		refs, err := labelled(ctx, u.Client, k)
		if err != nil {
			return nil, err
		}
		pl.labelled = append(pl.labelled, refs...)
	}
	pols, err := policyRefs()
	if err != nil {
		return nil, err
	}
	if pl.policies, err = remaining(ctx, u.Client, pols); err != nil {
		return nil, err
	}
	if pl.crds, err = fleetCRDs(ctx, u.Client); err != nil {
		return nil, err
	}
	if pl.namespaces, err = u.fleetNamespaces(ctx); err != nil {
		return nil, err
	}
	return pl, nil
}

func (u *Upstream) printPlan(p *progress, pl *plan) {
	verb := "uninstalling"
	if u.DryRun {
		verb = "would delete (dry run, nothing is changed)"
	}
	p.printf("%s:", verb)
	group := func(what string, refs []ref) {
		if len(refs) == 0 {
			return
		}
		p.printf("  %s (%d):", what, len(refs))
		for _, r := range refs {
			p.printf("    %s", r)
		}
	}
	group("registration tokens", pl.tokens)
	group("Clusters (and the agents the controller pushed to them)", pl.clusters)
	group("other fleet objects", pl.objects)
	group("the controller's and agents' objects (labelled as fleet's)", pl.labelled)
	group("admission policies", pl.policies)
	if !u.KeepCRDs {
		group("CustomResourceDefinitions", pl.crds)
	}
	group("namespaces, with everything in them", pl.namespaces)
}

// controllerRunsIfNeeded refuses to start when objects carry finalizers
// that only the controller removes and it does not run: they would stay
// Terminating, and so would their CRDs.
func (u *Upstream) controllerRunsIfNeeded(ctx context.Context) error {
	var held []ref
	for _, kinds := range [][]kind{{kindCluster}, fleetObjectKinds, {kindRollout}} {
		for _, k := range kinds {
			_, items, err := list(ctx, u.Client, k)
			if err != nil {
				return err
			}
			for _, o := range items {
				if len(o.Finalizers) > 0 {
					held = append(held, ref{kind: k, namespace: o.Namespace, name: o.Name})
				}
			}
		}
	}
	if len(held) == 0 {
		return nil
	}
	// One Deployment per shard; each reconciles its share of the Clusters.
	ds := &appsv1.DeploymentList{}
	if err := u.Client.List(ctx, ds, client.InNamespace(u.Namespace), client.MatchingLabels(controllerLabels)); err != nil {
		return fmt.Errorf("reading the controller's Deployments: %w", err)
	}
	running := len(ds.Items) > 0
	for _, d := range ds.Items {
		running = running && d.Status.AvailableReplicas > 0
	}
	if running {
		return nil
	}
	return fmt.Errorf("%d fleet objects carry finalizers that only the controller removes (%s), and the controller (Deployment %s/%s) has no available replica: "+
		"start the controller again (reinstall the chart with the values you installed it with, or `kubectl -n %s scale deployment %s --replicas=1`) and run the uninstall again; "+
		"nothing was changed (if the controller cannot run any more, see docs/operations.md \"Uninstall\" for removing the finalizers by hand)",
		len(held), names(held, 3), u.Namespace, ControllerDeployment, u.Namespace, ControllerDeployment)
}

// stopMaking turns off the local cluster and Cluster API auto-registration
// in the controller's configuration, so the Clusters deleted next are not
// made again. helm uninstall removes the ConfigMap later anyway.
func (u *Upstream) stopMaking(ctx context.Context, p *progress) error {
	cm := &corev1.ConfigMap{}
	err := u.Client.Get(ctx, client.ObjectKey{Namespace: u.Namespace, Name: config.ConfigMapName}, cm)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the controller's configuration: %w", err)
	}
	doc := map[string]any{}
	if raw := cm.Data[config.ConfigMapKey]; strings.TrimSpace(raw) != "" {
		if err := json.Unmarshal([]byte(raw), &doc); err != nil {
			// An invalid configuration: the controller keeps its last
			// valid one, so this one cannot be edited into a valid one.
			return fmt.Errorf("the controller's configuration %s/%s is not valid JSON (%v): fix it first, so the uninstall can turn off the local cluster", u.Namespace, config.ConfigMapName, err)
		}
	}
	bootstrap, _ := doc["bootstrap"].(map[string]any)
	if bootstrap == nil {
		bootstrap = map[string]any{}
	}
	bootstrap["enabled"] = false
	doc["bootstrap"] = bootstrap
	delete(doc, "capiNamespaces")
	delete(doc, "capiClusterSelector")
	b, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	if cm.Data[config.ConfigMapKey] == string(b) {
		return nil
	}
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data[config.ConfigMapKey] = string(b)
	if err := u.Client.Update(ctx, cm, client.FieldOwner(FieldManager)); err != nil {
		return fmt.Errorf("turning off the local cluster and Cluster API auto-registration in %s/%s: %w", u.Namespace, config.ConfigMapName, err)
	}
	p.printf("turned off the local cluster and Cluster API auto-registration in the controller's configuration, so no Cluster is made again")
	return nil
}

// deleteKinds deletes every object of kinds and waits until they are gone;
// objects made meanwhile are deleted too.
func (u *Upstream) deleteKinds(ctx context.Context, p *progress, kinds ...kind) error {
	all := func() ([]ref, error) {
		var refs []ref
		for _, k := range kinds {
			r, _, err := list(ctx, u.Client, k)
			if err != nil {
				return nil, err
			}
			refs = append(refs, r...)
		}
		return refs, nil
	}
	refs, err := all()
	if err != nil {
		return err
	}
	if err := deleteAll(ctx, u.Client, refs); err != nil {
		return err
	}
	what := make([]string, 0, len(kinds))
	for _, k := range kinds {
		what = append(what, k.gvk.Kind+"s")
	}
	left, err := waitGone(ctx, p, strings.Join(what, "/"), u.Timeout, all, func(left []ref) error { return deleteAll(ctx, u.Client, left) })
	if err != nil {
		return err
	}
	if len(left) > 0 {
		return fmt.Errorf("after %s, %d objects are still there: %s; something holds them (a finalizer the controller did not remove, or something making them again): look at the controller's log (`kubectl -n %s logs deploy/%s`) and the objects' events, then run the uninstall again",
			u.Timeout, len(left), names(left, 5), u.Namespace, ControllerDeployment)
	}
	return nil
}

// deleteAndWait deletes what list returns and waits until it is gone.
func (u *Upstream) deleteAndWait(ctx context.Context, p *progress, what string, list func() ([]ref, error)) error {
	refs, err := list()
	if err != nil {
		return err
	}
	if err := deleteAll(ctx, u.Client, refs); err != nil {
		return err
	}
	left, err := waitGone(ctx, p, what, u.Timeout, list, nil)
	if err != nil {
		return err
	}
	if len(left) > 0 {
		return fmt.Errorf("after %s, %d %s are still being deleted: %s; `kubectl get %s -o yaml` shows what holds them (status.conditions, finalizers)",
			u.Timeout, len(left), what, names(left, 5), strings.ToLower(left[0].kind.gvk.Kind))
	}
	return nil
}

// leftAgents says which downstream clusters may still run an agent once
// their Clusters are gone: agent-initiated ones (the controller never had
// their kubeconfig) and those whose agent the controller could not remove
// (an AgentNotRemoved event since start).
func (u *Upstream) leftAgents(ctx context.Context, clusters []fleet.Cluster, start time.Time) ([]LeftAgent, error) {
	var out []LeftAgent
	for _, c := range clusters {
		key := c.Namespace + "/" + c.Name
		pushed := c.Spec.KubeConfigSecret != "" && c.Status.AgentDeployedGeneration != nil
		agentNS := c.Status.Agent.Namespace
		if agentNS == "" {
			agentNS = c.Spec.AgentNamespace
		}
		if !pushed {
			if c.Status.Agent.LastSeen.IsZero() {
				continue // no agent ever reported in
			}
			out = append(out, LeftAgent{Cluster: key, Namespace: agentNS,
				Why: "its agent was installed downstream (agent-initiated), not by the controller, and keeps running there, refused by this cluster"})
			continue
		}
		evs := &corev1.EventList{}
		if err := u.Client.List(ctx, evs, client.InNamespace(c.Namespace),
			client.MatchingFields{"involvedObject.name": c.Name, "reason": "AgentNotRemoved"}); err != nil {
			return nil, fmt.Errorf("reading the events of Cluster %s: %w", key, err)
		}
		for _, ev := range evs.Items {
			if ev.CreationTimestamp.Time.After(start.Add(-30 * time.Second)) {
				out = append(out, LeftAgent{Cluster: key, Namespace: agentNS, Why: "the controller could not remove its agent (" + ev.Message + ")"})
				break
			}
		}
	}
	return out, nil
}

// controllerPods are the controller's pods (a Deployment's pods outlive
// it by their termination grace period).
func (u *Upstream) controllerPods(ctx context.Context) ([]ref, error) {
	refs, _, err := list(ctx, u.Client, kindPod, client.InNamespace(u.Namespace), client.MatchingLabels(controllerLabels))
	return refs, err
}

// policyRefs are the admission policies and bindings fleet ships.
func policyRefs() ([]ref, error) {
	objs, err := policies.Objects()
	if err != nil {
		return nil, err
	}
	refs := make([]ref, 0, len(objs))
	for _, o := range objs {
		k := kindPolicy
		if o.Kind == policies.KindBinding {
			k = kindPolicyBinding
		}
		refs = append(refs, ref{kind: k, name: o.Name})
	}
	return refs, nil
}

// fleetCRDs are the CustomResourceDefinitions of group fleet.cattle.io.
func fleetCRDs(ctx context.Context, c client.Client) ([]ref, error) {
	all, _, err := list(ctx, c, kindCRD)
	if err != nil {
		return nil, err
	}
	var out []ref
	for _, r := range all {
		if strings.HasSuffix(r.name, "."+fleetGroup) {
			out = append(out, r)
		}
	}
	return out, nil
}

// fleetNamespaces are the controller's namespace, the system registration
// namespace, and every namespace fleet made (labelled managed: the cluster
// namespaces, the local cluster's workspace when the controller made it, a
// pushed agent's namespace; labelled impersonator: the agent's impersonators
// of cluster access). Kubernetes' own namespaces never are.
func (u *Upstream) fleetNamespaces(ctx context.Context) ([]ref, error) {
	l := &corev1.NamespaceList{}
	if err := u.Client.List(ctx, l); err != nil {
		return nil, fmt.Errorf("listing namespaces: %w", err)
	}
	var out []ref
	for _, ns := range l.Items {
		if isFleetNamespace(&ns, u.Namespace, config.DefaultSystemRegistrationNS) {
			out = append(out, ref{kind: kindNamespace, name: ns.Name})
		}
	}
	return out, nil
}

func isFleetNamespace(ns *corev1.Namespace, byName ...string) bool {
	if isKubeNamespace(ns.Name) {
		return false
	}
	for _, n := range byName {
		if ns.Name == n {
			return true
		}
	}
	for _, sel := range fleetSelectors {
		for k, v := range sel {
			if ns.Labels[k] == v {
				return true
			}
		}
	}
	return false
}

func nsNames(refs []ref) string {
	s := make([]string, 0, len(refs))
	for _, r := range refs {
		s = append(s, r.name)
	}
	if len(s) == 0 {
		return "(none)"
	}
	return strings.Join(s, ", ")
}
