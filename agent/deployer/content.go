package deployer

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/bundlecontent"
	"github.com/gitops-fleet/fleet/internal/reconciler"
)

// readContent returns the manifests of a BundleDeployment: from its content
// Secret, inline or, for large content, from the chunk Secrets its index
// names (internal/bundlecontent), each checked against its digest and the
// whole against the deployment's manifest ID. Content not written yet (no
// Secret, other manifests, a chunk missing: the controller writes chunks
// before the index and deletes the previous ones after) is a
// *reconciler.Waiting (WaitingForContent); content that cannot be read (a
// chunk that is not the one the index names) a *reconciler.Stalled
// (ContentInvalid). A new or changed Secret (watched, chunks included)
// brings the BundleDeployment back.
func (d *Deployer) readContent(ctx context.Context, bd *fleet.BundleDeployment) ([]byte, error) {
	s := &corev1.Secret{}
	key := client.ObjectKey{Namespace: bd.Namespace, Name: bundlecontent.SecretName(bd.Name)}
	if err := d.upReader.Get(ctx, key, s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, reconciler.Wait(WaitingForContentReason, contentRetry, "waiting for the content secret %s/%s", key.Namespace, key.Name)
		}
		return nil, fmt.Errorf("reading content secret %s/%s: %w", key.Namespace, key.Name, err)
	}
	want := bundlecontent.SplitDeploymentID(bd.Spec.DeploymentID)
	get := func(ctx context.Context, name string) (*corev1.Secret, error) {
		c := &corev1.Secret{}
		return c, d.upReader.Get(ctx, client.ObjectKey{Namespace: bd.Namespace, Name: name}, c)
	}
	manifests, err := bundlecontent.Read(ctx, s, bd.Name, want, get)
	var (
		stale   *bundlecontent.StaleError
		missing *bundlecontent.MissingChunkError
		invalid *bundlecontent.InvalidError
	)
	switch {
	case err == nil:
		return manifests, nil
	case errors.As(err, &stale):
		return nil, reconciler.Wait(WaitingForContentReason, contentRetry, "waiting for content %s: the content secret %s/%s holds %s", shortID(want), key.Namespace, key.Name, shortID(stale.Holds))
	case errors.As(err, &missing):
		return nil, reconciler.Wait(WaitingForContentReason, contentRetry, "waiting for content %s: %v", shortID(want), missing)
	case errors.As(err, &invalid):
		return nil, reconciler.Stall(ContentInvalidReason, "%v", invalid)
	default:
		return nil, err
	}
}

// contentOf maps a Secret of the cluster namespace to the BundleDeployment
// whose content it is: a content Secret is named like it, a chunk Secret
// carries its Bundle's name (which the BundleDeployment has).
func contentOf(_ context.Context, o client.Object) []reconcile.Request {
	name := o.GetName()
	if l := o.GetLabels(); l[bundlecontent.ChunkLabel] == "true" {
		if name = l[fleet.BundleLabel]; name == "" {
			return nil
		}
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: name}}}
}
