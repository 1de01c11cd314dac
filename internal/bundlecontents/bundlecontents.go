// Package bundlecontents writes a Bundle whose resources do not fit in one
// API object: its resources go to immutable Secrets of the Bundle's
// namespace (internal/bundlecontent's Contents layout: the gzip of their
// JSON, cut in chunks of at most 960 KiB, and an index), and the Bundle
// holds spec.contentsId instead of spec.resources. Both writers of Bundles
// call it: `fleet apply` and the GitRepo source.
//
// The order of the writes never leaves a Bundle without its contents:
//
//  1. the contents Secrets (chunks, then the index that names them), owned
//     by the Bundle when it exists already;
//  2. the Bundle, with spec.contentsId (the caller's write: server-side
//     apply, create or update);
//  3. an owner reference to the Bundle on the contents Secrets that lack it
//     (a new Bundle has a UID only after step 2), so they go with it;
//  4. the contents Secrets of any other contentsId of this Bundle are
//     deleted: the contents the Bundle named before, or those of a write
//     that stopped between 1 and 2.
//
// A writer that stops between 1 and 3 leaves Secrets without an owner; the
// next write of the Bundle owns them (step 3) or deletes them (step 4).
package bundlecontents

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/bundlecontent"
)

// DefaultThreshold is the size of spec.resources (JSON) above which a
// Bundle's resources are written as contents: 1 MiB keeps the Bundle, with
// its options and targets, well under etcd's 1.5 MiB request limit.
const DefaultThreshold = 1 << 20

// FieldManager owns the contents Secrets the writer creates and the owner
// references it adds.
const FieldManager = "fleet-bundle-contents"

// Split returns b as it is to be written, and the Secrets that must exist
// before it. A Bundle whose spec.resources are at most threshold bytes of
// JSON (threshold 0: DefaultThreshold), or that sets spec.contentsId
// itself, is returned as it is, with no Secret. Otherwise the copy has
// spec.resources empty and spec.contentsId "s-<sha256 of the resources'
// JSON>", and the Secrets (in b's namespace, chunks first, the index last)
// hold the resources. b is not changed; the copy shares its maps and
// pointers (labels, options), so treat both as read-only.
func Split(b *fleet.Bundle, threshold int) (*fleet.Bundle, []*corev1.Secret, error) {
	if threshold <= 0 {
		threshold = DefaultThreshold
	}
	if b.Spec.ContentsID != "" || len(b.Spec.Resources) == 0 {
		return b, nil, nil
	}
	id, data, err := bundlecontent.ContentsID(b.Spec.Resources)
	if err != nil {
		return nil, nil, fmt.Errorf("bundle %s/%s: %w", b.Namespace, b.Name, err)
	}
	if len(data) <= threshold {
		return b, nil, nil
	}
	enc, err := bundlecontent.Contents.Encode(b.Name, data)
	if err != nil {
		return nil, nil, fmt.Errorf("bundle %s/%s: its resources: %w", b.Namespace, b.Name, err)
	}
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{
			Namespace: b.Namespace,
			Name:      name,
			Labels: map[string]string{
				bundlecontent.ContentsLabel: "true",
				fleet.BundleLabel:           b.Name,
				fleet.BundleNamespaceLabel:  b.Namespace,
			},
			Annotations: map[string]string{bundlecontent.ContentsIDAnnotation: id},
		}
	}
	var secrets []*corev1.Secret
	for _, c := range enc.Chunks {
		secrets = append(secrets, &corev1.Secret{
			ObjectMeta: meta(c.Name), Type: bundlecontent.ContentsChunkType, Immutable: ptr.To(true),
			Data: map[string][]byte{bundlecontent.KeyChunk: c.Data},
		})
	}
	secrets = append(secrets, &corev1.Secret{
		ObjectMeta: meta(bundlecontent.ContentsSecretName(b.Name, id)), Type: bundlecontent.ContentsSecretType,
		Immutable: ptr.To(true), Data: enc.Data,
	})
	// A shallow copy: only the two fields change (DeepCopy would panic on
	// values of Go types JSON does not have, such as int, which a Bundle
	// made in memory may hold).
	out := *b
	out.Spec.Resources = nil
	out.Spec.ContentsID = id
	return &out, secrets, nil
}

// WriteBundle writes the Bundle itself (server-side apply, create or update).
type WriteBundle func(ctx context.Context, b *fleet.Bundle) error

// Write writes b and its contents Secrets (as Split made them) in the order
// of the package's doc, with c (the writer's own identity): the Secrets,
// then the Bundle through write, then the owner references, then the
// contents of other contentsIds of b are deleted. With no Secrets it writes
// the Bundle and deletes the contents it held before, if it had any (so a
// writer of Bundles that fit in one object needs no right on Secrets).
func Write(ctx context.Context, c client.Client, b *fleet.Bundle, secrets []*corev1.Secret, write WriteBundle) error {
	return writeContents(ctx, c, b, secrets, write, func(_ *fleet.Bundle) error {
		return Collect(ctx, c, b.Namespace, b.Name, b.Spec.ContentsID)
	})
}

// WriteByName is Write for a writer that may not list Secrets (the GitRepo
// source reads Secrets by name only): step 4 deletes only the contents the
// Bundle named before (its index, and the chunks the index names), found by
// name. Contents of a write that stopped between steps 1 and 2 stay until
// the Bundle is deleted (they are owned by it when it existed then).
func WriteByName(ctx context.Context, c client.Client, b *fleet.Bundle, secrets []*corev1.Secret, write WriteBundle) error {
	return writeContents(ctx, c, b, secrets, write, func(existing *fleet.Bundle) error {
		if existing == nil || existing.Spec.ContentsID == "" || existing.Spec.ContentsID == b.Spec.ContentsID {
			return nil
		}
		return CollectID(ctx, c, b.Namespace, b.Name, existing.Spec.ContentsID)
	})
}

func writeContents(ctx context.Context, c client.Client, b *fleet.Bundle, secrets []*corev1.Secret, write WriteBundle, collect func(existing *fleet.Bundle) error) error {
	existing := &fleet.Bundle{}
	err := c.Get(ctx, client.ObjectKeyFromObject(b), existing)
	switch {
	case apierrors.IsNotFound(err):
		existing = nil
	case err != nil:
		return err
	}
	for _, s := range secrets {
		s = s.DeepCopy()
		if existing != nil {
			s.OwnerReferences = []metav1.OwnerReference{ownerRef(existing)}
		}
		if err := create(ctx, c, s); err != nil {
			return err
		}
	}
	if err := write(ctx, b); err != nil {
		return err
	}
	if len(secrets) == 0 && (existing == nil || existing.Spec.ContentsID == "") {
		// No contents before or now: nothing to own or collect (and a
		// writer of small Bundles needs no right on Secrets).
		return nil
	}
	if len(secrets) > 0 {
		written := &fleet.Bundle{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(b), written); err != nil {
			return fmt.Errorf("reading Bundle %s/%s back to own its contents: %w", b.Namespace, b.Name, err)
		}
		for _, s := range secrets {
			if err := own(ctx, c, s, written); err != nil {
				return err
			}
		}
	}
	return collect(existing)
}

// create creates s, or accepts the Secret of its name when it is s already
// (contents are immutable and named after their ID).
func create(ctx context.Context, c client.Client, s *corev1.Secret) error {
	err := c.Create(ctx, s, client.FieldOwner(FieldManager))
	if !apierrors.IsAlreadyExists(err) {
		if err != nil {
			return fmt.Errorf("writing contents Secret %s/%s: %w", s.Namespace, s.Name, err)
		}
		return nil
	}
	got := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(s), got); err != nil {
		return fmt.Errorf("reading contents Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	if got.Type == s.Type && got.Labels[bundlecontent.ContentsLabel] == "true" &&
		got.Labels[fleet.BundleLabel] == s.Labels[fleet.BundleLabel] && sameData(got.Data, s.Data) && got.DeletionTimestamp.IsZero() {
		return nil
	}
	if !got.DeletionTimestamp.IsZero() {
		return fmt.Errorf("contents Secret %s/%s is being deleted; write the Bundle again once it is gone", s.Namespace, s.Name)
	}
	return fmt.Errorf("Secret %s/%s exists and is not these contents of Bundle %s (type %s, label %s, the same data): delete it, then write the Bundle again",
		s.Namespace, s.Name, s.Labels[fleet.BundleLabel], s.Type, bundlecontent.ContentsLabel)
}

func sameData(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !bytes.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

func ownerRef(b *fleet.Bundle) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion: fleet.GroupVersion.String(), Kind: "Bundle", Name: b.Name, UID: b.UID, Controller: ptr.To(true),
	}
}

// own makes Bundle b the owner of its contents Secret s, unless it is.
// Only the metadata changes: the Secret's data is immutable.
func own(ctx context.Context, c client.Client, s *corev1.Secret, b *fleet.Bundle) error {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	if err := c.Get(ctx, client.ObjectKeyFromObject(s), m); err != nil {
		return fmt.Errorf("reading contents Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	for _, r := range m.OwnerReferences {
		if r.UID == b.UID {
			return nil
		}
	}
	refs := []metav1.OwnerReference{ownerRef(b)}
	for _, r := range m.OwnerReferences {
		if r.Kind != "Bundle" || r.APIVersion != fleet.GroupVersion.String() {
			refs = append(refs, r) // owners other than a Bundle of this name stay
		}
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"ownerReferences": refs, "resourceVersion": m.ResourceVersion}})
	if err != nil {
		return err
	}
	if err := c.Patch(ctx, m, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(FieldManager)); err != nil {
		return fmt.Errorf("making Bundle %s/%s the owner of its contents Secret %s: %w", b.Namespace, b.Name, s.Name, err)
	}
	return nil
}

// Collect deletes the contents Secrets of Bundle namespace/name that belong
// to another contentsId than keep ("": all of them).
func Collect(ctx context.Context, c client.Client, namespace, name, keep string) error {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("SecretList"))
	if err := c.List(ctx, list, client.InNamespace(namespace), client.MatchingLabels{
		bundlecontent.ContentsLabel: "true", fleet.BundleLabel: name, fleet.BundleNamespaceLabel: namespace,
	}); err != nil {
		return fmt.Errorf("listing the contents Secrets of Bundle %s/%s: %w", namespace, name, err)
	}
	var errs []error
	for i := range list.Items {
		m := &list.Items[i]
		if m.Annotations[bundlecontent.ContentsIDAnnotation] == keep && keep != "" || !m.DeletionTimestamp.IsZero() {
			continue
		}
		m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
		if err := c.Delete(ctx, m, client.Preconditions{UID: &m.UID}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			errs = append(errs, fmt.Errorf("deleting contents Secret %s/%s of earlier contents: %w", m.Namespace, m.Name, err))
		}
	}
	return errors.Join(errs...)
}

// CollectID deletes the contents id of Bundle namespace/name by name: its
// index Secret and the chunks the index names, each only when it is a
// contents Secret of that Bundle (its type and labels), so an index cannot
// make the writer delete another Secret.
func CollectID(ctx context.Context, c client.Client, namespace, name, id string) error {
	index := &corev1.Secret{}
	err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: bundlecontent.ContentsSecretName(name, id)}, index)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the earlier contents of Bundle %s/%s: %w", namespace, name, err)
	}
	if !isContentsOf(index, bundlecontent.ContentsSecretType, namespace, name, id) {
		return nil
	}
	var errs []error
	del := func(s *corev1.Secret) {
		if err := c.Delete(ctx, s, client.Preconditions{UID: &s.UID}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			errs = append(errs, fmt.Errorf("deleting contents Secret %s/%s of earlier contents: %w", s.Namespace, s.Name, err))
		}
	}
	idx := bundlecontent.Index{}
	if raw, ok := index.Data[bundlecontent.KeyChunks]; ok {
		if err := json.Unmarshal(raw, &idx); err != nil {
			idx.Chunks = nil // unreadable: only the index goes
		}
	}
	for i, ref := range idx.Chunks {
		if ref.Name != bundlecontent.Contents.ChunkName(name, idx.ManifestID, i) {
			continue
		}
		chunk := &corev1.Secret{}
		err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: ref.Name}, chunk)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if isContentsOf(chunk, bundlecontent.ContentsChunkType, namespace, name, id) {
			del(chunk)
		}
	}
	del(index)
	return errors.Join(errs...)
}

func isContentsOf(s *corev1.Secret, typ corev1.SecretType, namespace, name, id string) bool {
	return s.Type == typ && s.Labels[bundlecontent.ContentsLabel] == "true" && s.Labels[fleet.BundleLabel] == name &&
		s.Labels[fleet.BundleNamespaceLabel] == namespace && s.Annotations[bundlecontent.ContentsIDAnnotation] == id
}
