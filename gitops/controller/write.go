package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"

	"github.com/fluxcd/pkg/ssa"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/gitops/bundlereader"
	"github.com/gitops-fleet/fleet/gitops/bundlewrite"
	"github.com/gitops-fleet/fleet/gitops/decrypt"
)

// pathFailure is a Bundle that was read but not written.
type pathFailure struct {
	path, bundle string
	err          error
}

// written is what write did.
type written struct {
	// made are the Bundles of this commit (written or unchanged).
	made map[string]bool
	// secrets are the staged Secrets of this commit.
	secrets map[string]bool
	// failed are the Bundles refused (a name taken, a Secret taken).
	failed []pathFailure
	// transient is an API error: the pass is retried.
	transient error
}

// ownerRef makes the GitRepo the controller of what the pass writes
// (garbage-collected with it). No blockOwnerDeletion: that would need the
// right to update the GitRepo's finalizers.
func (p *pass) ownerRef() metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion: fleet.GroupVersion.String(), Kind: "GitRepo",
		Name: p.repo.Name, UID: p.repo.UID, Controller: ptr.To(true),
	}
}

// inputHash is the hash of what a Bundle is made of, without the commit
// label (a commit that leaves the Bundle as it was does not rewrite it).
func inputHash(b *fleet.Bundle) (string, error) {
	labels := maps.Clone(b.Labels)
	delete(labels, fleet.CommitLabel)
	annotations := maps.Clone(b.Annotations)
	delete(annotations, InputHashAnnotation)
	data, err := json.Marshal(struct {
		Labels, Annotations map[string]string
		Spec                fleet.BundleSpec
	}{labels, annotations, b.Spec})
	if err != nil {
		return "", err
	}
	return hashOf(string(data)), nil
}

// write applies the Bundles whose input changed and the staged Secrets.
func (p *pass) write(ctx context.Context, res *bundlereader.Result, staged map[string]*stagedSecrets, commit string) written {
	log := ctrl.LoggerFrom(ctx)
	w := written{made: map[string]bool{}, secrets: map[string]bool{}}
	for _, rb := range res.Bundles {
		b := rb.Bundle
		w.made[b.Name] = true
		if st := staged[b.Name]; st != nil {
			for _, s := range st.secrets {
				w.secrets[s.Name] = true
			}
		}
	}
	for _, rb := range res.Bundles {
		b := rb.Bundle
		fail := func(err error) { w.failed = append(w.failed, pathFailure{path: rb.Path, bundle: b.Name, err: err}) }
		// The staged Secrets first: a Bundle never names a Secret that is
		// not there.
		if st := staged[b.Name]; st != nil {
			if err := p.writeSecrets(ctx, st); err != nil {
				if apierrors.IsForbidden(err) || isRefusal(err) {
					fail(err)
					continue
				}
				w.transient = err
				return w
			}
		}
		hash, err := inputHash(b)
		if err != nil {
			fail(err)
			continue
		}
		existing, err := p.existingBundle(ctx, b)
		if err != nil {
			w.transient = err
			return w
		}
		if err := bundlewrite.CheckTakeover(existing, p.repo.Name, p.repo.UID); err != nil {
			fail(err)
			continue
		}
		if existing != nil && existing.Annotations[InputHashAnnotation] == hash && metav1.IsControlledBy(existing, p.repo) {
			continue
		}
		if b.Annotations == nil {
			b.Annotations = map[string]string{}
		}
		b.Annotations[InputHashAnnotation] = hash
		b.OwnerReferences = []metav1.OwnerReference{p.ownerRef()}
		obj, err := bundlewrite.Object(b)
		if err != nil {
			fail(err)
			continue
		}
		entry, err := p.r.ssa.Apply(ctx, obj, ssa.DefaultApplyOptions())
		if err != nil {
			if apierrors.IsInvalid(err) || apierrors.IsRequestEntityTooLargeError(err) || apierrors.IsBadRequest(err) {
				fail(err)
				continue
			}
			w.transient = fmt.Errorf("writing Bundle %s/%s: %w", b.Namespace, b.Name, err)
			return w
		}
		log.V(1).Info("Bundle written", "bundle", b.Name, "action", entry.Action, "commit", commit)
	}
	return w
}

// existingBundle is the Bundle of b's name, nil when there is none (the
// cache first; what it does not show is asked of the API server, so a
// Bundle someone just made is not taken over).
func (p *pass) existingBundle(ctx context.Context, b *fleet.Bundle) (*fleet.Bundle, error) {
	existing := &fleet.Bundle{}
	err := p.r.client.Get(ctx, client.ObjectKeyFromObject(b), existing)
	if apierrors.IsNotFound(err) {
		err = p.r.apiReader.Get(ctx, client.ObjectKeyFromObject(b), existing)
	}
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return existing, nil
}

// refusal is a staged Secret the GitRepo may not write.
type refusal struct{ err error }

func (r *refusal) Error() string { return r.err.Error() }

func isRefusal(err error) bool {
	_, ok := err.(*refusal)
	return ok
}

// writeSecrets applies one Bundle's staged Secrets, each only over a copy
// this GitRepo staged for the same Bundle.
func (p *pass) writeSecrets(ctx context.Context, st *stagedSecrets) error {
	for _, s := range st.secrets {
		existing := &corev1.Secret{}
		err := p.r.apiReader.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: s.Name}, existing)
		switch {
		case apierrors.IsNotFound(err):
			existing = nil
		case err != nil:
			return err
		}
		if err := decrypt.CanWrite(existing, st.target); err != nil {
			return &refusal{err}
		}
		s.OwnerReferences = []metav1.OwnerReference{p.ownerRef()}
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(s)
		if err != nil {
			return err
		}
		if md, ok := m["metadata"].(map[string]any); ok {
			delete(md, "creationTimestamp")
		}
		if _, err := p.r.ssa.Apply(ctx, &unstructured.Unstructured{Object: m}, ssa.DefaultApplyOptions()); err != nil {
			return fmt.Errorf("writing staged Secret %s/%s: %w", s.Namespace, s.Name, err)
		}
	}
	return nil
}

// prune deletes the GitRepo's Bundles and staged Secrets that this commit
// no longer makes (called only after a complete read and write).
func (p *pass) prune(ctx context.Context, made, secrets map[string]bool) error {
	log := ctrl.LoggerFrom(ctx)
	list := &fleet.BundleList{}
	if err := p.r.client.List(ctx, list, client.InNamespace(p.repo.Namespace), client.MatchingLabels{fleet.RepoLabel: p.repo.Name}); err != nil {
		return err
	}
	var stale []string
	for i := range list.Items {
		b := &list.Items[i]
		if made[b.Name] || b.DeletionTimestamp != nil {
			continue
		}
		if ref := metav1.GetControllerOfNoCopy(b); ref != nil && ref.UID != p.repo.UID {
			continue
		}
		stale = append(stale, b.Name)
	}
	sort.Strings(stale)
	for _, name := range stale {
		b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: p.repo.Namespace, Name: name}}
		if err := p.r.client.Delete(ctx, b); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("pruning Bundle %s/%s: %w", p.repo.Namespace, name, err)
		}
		log.Info("Bundle pruned (no longer in the repository)", "bundle", name)
	}
	// Staged Secrets: those the GitRepo's Bundles named before this pass
	// (their downstreamResources) that this commit no longer stages. Found
	// through the Bundles, so the component needs no right to list Secrets.
	var names []string
	for i := range list.Items {
		for _, d := range list.Items[i].Spec.DownstreamResources {
			if d.Kind == "Secret" && !secrets[d.Name] && !slices.Contains(names, d.Name) {
				names = append(names, d.Name)
			}
		}
	}
	sort.Strings(names)
	for _, name := range names {
		s := &metav1.PartialObjectMetadata{}
		s.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
		err := p.r.apiReader.Get(ctx, types.NamespacedName{Namespace: p.repo.Namespace, Name: name}, s)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return err
		}
		// Only a copy this GitRepo staged: a Bundle may name any Secret of
		// its namespace in downstreamResources.
		if s.Labels[decrypt.LabelGitRepo] != decrypt.LabelValue(p.repo.Name) || !metav1.IsControlledBy(s, p.repo) || s.DeletionTimestamp != nil {
			continue
		}
		del := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name}}
		if err := p.r.client.Delete(ctx, del, client.Preconditions{UID: &s.UID}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("pruning staged Secret %s/%s: %w", s.Namespace, s.Name, err)
		}
		log.Info("staged Secret pruned (no longer in the repository)", "secret", s.Name)
	}
	return nil
}
