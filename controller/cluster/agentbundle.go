package cluster

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller/rollout"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/names"
	"github.com/gitops-fleet/fleet/internal/reconciler"
	"github.com/gitops-fleet/fleet/renderer/agentvalues"
)

const (
	// AgentValuesHashAnnotation on the agent Bundle records the values and
	// the chart it was rendered from (AgentRenderer.Hash), so an unchanged
	// Cluster costs no render and a changed chart is rendered again.
	AgentValuesHashAnnotation = "fleet.cattle.io/agent-values-hash"
	// AgentBundleFile is the agent's manifest file inside its Bundle.
	AgentBundleFile = "fleet-agent.yaml"
)

// ObjectConflictReason (condition reason): the agent Bundle's name is taken
// by a Bundle another object controls.
const ObjectConflictReason = "ObjectConflict"

// reconcileAgentBundle keeps Bundle fleet-agent-<cluster>: the agent as
// rendered from charts/fleet-agent by the same values builder as the import
// path, without the bootstrap Secret, targeted at the cluster, labelled
// fleet.AgentBundleLabel and controlled by the Cluster. It is the
// reviewable record of the agent, and (manageagent) what the agent applies
// to itself after registration. It never holds a credential.
func (r *Reconciler) reconcileAgentBundle(ctx context.Context, p *pass) error {
	cluster, cfg := p.cluster, p.cfg
	if !cfg.GetManageAgent() {
		return nil
	}
	target := cluster
	if cluster.Spec.KubeConfigSecret == "" && cluster.Spec.AgentNamespace == "" {
		// An agent-initiated agent runs where it was installed: manage it
		// there, once it has said where that is.
		if cluster.Status.Agent.Namespace == "" {
			return nil
		}
		target = cluster.DeepCopy()
		target.Spec.AgentNamespace = cluster.Status.Agent.Namespace
	}
	owner := agentBundleOwner{cluster: cluster, scheme: r.Client.Scheme()}
	key := client.ObjectKey{Namespace: cluster.Namespace, Name: names.AgentBundle(cluster.Name)}
	existing := &fleet.Bundle{}
	err := r.Client.Get(ctx, key, existing)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading the agent Bundle %s: %w", key, err)
	}
	hasBundle := err == nil

	// A change of every agent (the chart, the configuration's agent
	// settings) may be staged: the rollout gate says what this Cluster's
	// agent is rendered from now.
	src, err := r.agentSource(ctx, cfg, cluster, hasBundle, existing.Annotations[rollout.RevisionAnnotation])
	if err != nil {
		return err
	}
	p.rollout = src
	if src.Hold {
		return nil
	}
	rdr, renderCfg := r.Renderer, cfg
	if src.Renderer != nil {
		rdr, renderCfg = src.Renderer, src.Config
	}
	values, err := agentvalues.ForCluster(target, renderCfg, nil)
	if err != nil {
		return reconciler.Stall(fleet.RenderFailedReason, "cannot build the agent: %v", err)
	}
	// The chart is part of the hash: with the values alone, a controller
	// upgrade shipping a changed agent chart would never reach this Bundle.
	hash, err := rdr.Hash(values)
	if err != nil {
		return fmt.Errorf("hashing the agent's values: %w", err)
	}
	if hasBundle && existing.Annotations[AgentValuesHashAnnotation] == hash && existing.Annotations[rollout.RevisionAnnotation] == src.Revision &&
		existing.Labels[fleet.AgentBundleLabel] == "true" && owner.Check(existing) == nil && correctsDrift(&existing.Spec.BundleDeploymentOptions) == pushless(cluster) {
		// Rendered from these values and this chart already.
		return nil
	}
	out, err := rdr.Render(values)
	if err != nil {
		return reconciler.Stall(fleet.RenderFailedReason, "cannot render the agent: %v", err)
	}
	bundle := &fleet.Bundle{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Annotations: map[string]string{AgentValuesHashAnnotation: hash, rollout.RevisionAnnotation: src.Revision}},
		Spec: fleet.BundleSpec{
			BundleDeploymentOptions: fleet.BundleDeploymentOptions{DefaultNamespace: values.Internal.SystemNamespace},
			Resources:               []fleet.BundleResource{{Name: AgentBundleFile, Content: string(out.YAML)}},
			Targets:                 []fleet.BundleTarget{{Name: "agent", ClusterName: cluster.Name}},
		},
	}
	if pushless(cluster) {
		bundle.Spec.CorrectDrift = &fleet.CorrectDrift{Enabled: true}
	}
	if r.objects == nil {
		r.objects = reconciler.NewObjects(r.Client, r.APIReader)
	}
	_, err = r.objects.Ensure(ctx, owner, bundle)
	return err
}

// pushless says whether the Cluster's agent gets its changes through its
// Bundle alone (agent-initiated: no kubeconfig to push with). Its Bundle
// then corrects drift: what changes the agent's objects downstream (a
// reinstall with a token's values, which know nothing of the Cluster's own
// settings, or a hand edit) is put back within a resync, not left until the
// next change. A pushed agent's Bundle does not: during a redeploy the push
// runs ahead of the Bundle's new content, and correcting that "drift" back
// would roll the agent twice more.
func pushless(c *fleet.Cluster) bool { return c.Spec.KubeConfigSecret == "" }

func correctsDrift(o *fleet.BundleDeploymentOptions) bool {
	return o.CorrectDrift != nil && o.CorrectDrift.Enabled
}

// agentBundleOwner makes and recognises a Cluster's agent Bundle: labelled
// as its agent Bundle and controlled by the Cluster, so the garbage
// collector removes it with the Cluster.
type agentBundleOwner struct {
	cluster *fleet.Cluster
	scheme  *runtime.Scheme
}

// Own labels the Bundle as the Cluster's agent Bundle and makes the Cluster
// its controller.
func (o agentBundleOwner) Own(obj client.Object) error {
	labels := obj.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[fleet.ManagedLabel] = "true"
	labels[fleet.ClusterLabel] = o.cluster.Name
	labels[fleet.AgentBundleLabel] = "true"
	obj.SetLabels(labels)
	return controllerutil.SetControllerReference(o.cluster, obj, o.scheme)
}

// Check accepts a Bundle this Cluster controls, or one nobody controls
// (which it adopts, as it always did); one controlled by anything else is
// not its to take.
func (o agentBundleOwner) Check(obj client.Object) error {
	ref := metav1.GetControllerOf(obj)
	if ref == nil || ref.UID == o.cluster.UID {
		return nil
	}
	key := client.ObjectKeyFromObject(obj)
	if ref.Kind == "Cluster" && ref.Name == o.cluster.Name {
		// The garbage collector removes it; the retry is a safety net.
		return reconciler.Wait(fleet.WaitingReason, reconciler.ConflictRetry,
			"waiting for the agent Bundle %s, left by an earlier Cluster of the same name, to be deleted", key)
	}
	return reconciler.Wait(ObjectConflictReason, reconciler.ConflictRetry,
		"Bundle %s exists and is controlled by %s %s, not by this Cluster: delete it, or rename it", key, ref.Kind, ref.Name)
}

// agentSource asks the rollout gate what the agent is rendered from; with
// no gate (staged rollouts not set up), the current chart and
// configuration.
func (r *Reconciler) agentSource(ctx context.Context, cfg *config.Config, c *fleet.Cluster, hasBundle bool, bundleRevision string) (rollout.Source, error) {
	revision, err := r.revision(cfg)
	if err != nil {
		return rollout.Source{}, reconciler.Stall(fleet.RenderFailedReason, "cannot build the agent: %v", err)
	}
	if r.Gate == nil {
		return rollout.Source{Revision: revision}, nil
	}
	return r.Gate.Decide(ctx, cfg, c.Namespace+"/"+c.Name, revision, hasBundle, bundleRevision)
}

// revision is the current agent revision, computed once per configuration.
func (r *Reconciler) revision(cfg *config.Config) (string, error) {
	r.revMu.Lock()
	defer r.revMu.Unlock()
	if r.revCfg == cfg && r.revValue != "" {
		return r.revValue, nil
	}
	rev, err := rollout.Revision(r.Renderer, cfg)
	if err != nil {
		return "", err
	}
	r.revCfg, r.revValue = cfg, rev
	return rev, nil
}
