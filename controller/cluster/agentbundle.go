package cluster

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/names"
	"github.com/gitops-fleet/fleet/renderer"
)

const (
	// AgentValuesHashAnnotation on the agent Bundle records the values and
	// the chart it was rendered from (AgentRenderer.Hash), so an unchanged
	// Cluster costs no render and a changed chart is rendered again.
	AgentValuesHashAnnotation = "fleet.cattle.io/agent-values-hash"
	// AgentBundleFile is the agent's manifest file inside its Bundle.
	AgentBundleFile = "fleet-agent.yaml"
)

// inputError is a problem with the Cluster's spec or the configuration that
// retrying cannot fix.
type inputError struct{ reason, msg string }

func (e *inputError) Error() string { return e.msg }

// reconcileAgentBundle writes Bundle fleet-agent-<cluster>: the agent as
// rendered from charts/fleet-agent by the same values builder as the import
// path, without the bootstrap Secret, targeted at the cluster, labelled
// fleet.AgentBundleLabel and controlled by the Cluster. It is the
// reviewable record of the agent, and (manageagent) what the agent applies
// to itself after registration. It never holds a credential.
func (r *Reconciler) reconcileAgentBundle(ctx context.Context, cluster *fleet.Cluster) error {
	cfg := r.Config.Get()
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
	values, err := renderer.AgentValuesForCluster(target, cfg, nil)
	if err != nil {
		return &inputError{reason: fleet.RenderFailedReason, msg: fmt.Sprintf("cannot build the agent: %v", err)}
	}
	// The chart is part of the hash: with the values alone, a controller
	// upgrade shipping a changed agent chart would never reach this Bundle.
	hash, err := r.Renderer.Hash(values)
	if err != nil {
		return err
	}
	key := client.ObjectKey{Namespace: cluster.Namespace, Name: names.AgentBundle(cluster.Name)}
	bundle := &fleet.Bundle{}
	err = r.Client.Get(ctx, key, bundle)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	exists := err == nil
	if exists && bundle.Annotations[AgentValuesHashAnnotation] == hash && bundle.Labels[fleet.AgentBundleLabel] == "true" {
		return nil
	}
	out, err := r.Renderer.Render(values)
	if err != nil {
		return &inputError{reason: fleet.RenderFailedReason, msg: fmt.Sprintf("cannot render the agent: %v", err)}
	}
	if !exists {
		bundle = &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	}
	if bundle.Labels == nil {
		bundle.Labels = map[string]string{}
	}
	bundle.Labels[fleet.ManagedLabel] = "true"
	bundle.Labels[fleet.ClusterLabel] = cluster.Name
	bundle.Labels[fleet.AgentBundleLabel] = "true"
	if bundle.Annotations == nil {
		bundle.Annotations = map[string]string{}
	}
	bundle.Annotations[AgentValuesHashAnnotation] = hash
	bundle.Spec = fleet.BundleSpec{
		BundleDeploymentOptions: fleet.BundleDeploymentOptions{DefaultNamespace: values.Internal.SystemNamespace},
		Resources:               []fleet.BundleResource{{Name: AgentBundleFile, Content: string(out.YAML)}},
		Targets:                 []fleet.BundleTarget{{Name: "agent", ClusterName: cluster.Name}},
	}
	if err := controllerutil.SetControllerReference(cluster, bundle, r.Client.Scheme()); err != nil {
		return err
	}
	if exists {
		return r.Client.Update(ctx, bundle)
	}
	return r.Client.Create(ctx, bundle)
}
