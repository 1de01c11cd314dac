package bundle

// This file reads a Bundle's contents: a Bundle whose resources did not fit
// in one object holds spec.contentsId, and its writer (fleet apply, the
// GitRepo source; internal/bundlecontents) put the resources in immutable
// Secrets of the Bundle's namespace. The controller reads them uncached,
// checks them as the agent checks a BundleDeployment's content, and renders
// them as if they were inline. They are read only when a render needs them:
// the render cache is keyed by the contentsId, which is the resources' hash.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/bundlecontent"
	"github.com/gitops-fleet/fleet/internal/reconciler"
)

// contentsRecheck is how often a Bundle waiting for its contents looks
// again, besides the watch on contents Secrets.
const contentsRecheck = 30 * time.Second

// bundleResourcesHash is the sha256 of the Bundle's resources' JSON: of the
// inline ones, or its contentsId (which is that sum).
func bundleResourcesHash(b *fleet.Bundle) string {
	if b.Spec.ContentsID != "" {
		return strings.TrimPrefix(b.Spec.ContentsID, "s-")
	}
	return resourcesHash(b.Spec.Resources)
}

// checkContentsID refuses a Bundle whose spec.contentsId cannot name
// contents: resources both inline and elsewhere, or an ID of another form.
func checkContentsID(b *fleet.Bundle) error {
	id := b.Spec.ContentsID
	switch {
	case id == "":
		return nil
	case len(b.Spec.Resources) > 0:
		return reconciler.Stall(fleet.ContentsInvalidReason, "spec.contentsId and spec.resources are both set: a Bundle's resources are either inline or in its contents Secrets; remove one (fleet apply sets contentsId only for resources too large for one object)")
	case !strings.HasPrefix(id, "s-") || len(id) != 66 || strings.Trim(id[2:], "0123456789abcdef") != "":
		return reconciler.Stall(fleet.ContentsInvalidReason, "spec.contentsId %q is not \"s-\" and the hex sha256 of the resources' JSON, as fleet apply writes it", id)
	}
	return nil
}

// resourcesOf returns how this reconcile loads the Bundle's resources: the
// inline ones, or its contents read through the uncached reader. A missing
// Secret is waited for (its writer writes the contents before the Bundle,
// and a watch on contents Secrets brings the Bundle back); contents that
// are not the ones the contentsId names stall the Bundle, naming the
// Secret.
func (r *Reconciler) resourcesOf(b *fleet.Bundle) func(context.Context) ([]fleet.BundleResource, error) {
	if b.Spec.ContentsID == "" {
		return func(context.Context) ([]fleet.BundleResource, error) { return b.Spec.Resources, nil }
	}
	return func(ctx context.Context) ([]fleet.BundleResource, error) {
		get := func(ctx context.Context, name string) (*corev1.Secret, error) {
			s := &corev1.Secret{}
			err := r.valuesReader().Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: name}, s)
			return s, err
		}
		res, err := bundlecontent.ReadContents(ctx, b.Namespace, b.Name, b.Spec.ContentsID, get)
		var missing *bundlecontent.MissingChunkError
		var invalid *bundlecontent.InvalidError
		switch {
		case errors.As(err, &missing):
			return nil, reconciler.Wait(fleet.WaitingForContentsReason, contentsRecheck,
				"the resources are in contents %s, and Secret %s/%s of them does not exist (yet): the Bundle's writer (fleet apply, the GitRepo source) writes them before the Bundle; write the Bundle again if it does not appear",
				shortID(b.Spec.ContentsID), missing.Namespace, missing.Name)
		case errors.As(err, &invalid):
			return nil, reconciler.Stall(fleet.ContentsInvalidReason, "contents %s: %s", shortID(b.Spec.ContentsID), invalid.Message)
		case err != nil:
			return nil, fmt.Errorf("reading the contents of Bundle %s/%s: %w", b.Namespace, b.Name, err)
		}
		return res, nil
	}
}

func shortID(id string) string {
	if len(id) > 18 {
		return id[:18]
	}
	return id
}
