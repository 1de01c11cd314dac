package bundle

// This file holds the chunks of large content (internal/bundlecontent):
// content whose gzip stream does not fit in one Secret is written as
// immutable chunk Secrets in the cluster namespace, owned by the
// BundleDeployment, created before the content Secret's index names them
// and deleted once the content Secret holds other content. The agent reads
// them with the rights it has (Secrets of its cluster namespace), so no
// cluster reads another's.

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/bundlecontent"
	"github.com/gitops-fleet/fleet/internal/reconciler"
)

const (
	// ChunksAnnotation on a content Secret holding an index is how many
	// chunks it names, so the metadata cache tells whether they all exist.
	ChunksAnnotation = "fleet.cattle.io/content-chunks"
	// ChunkDigestAnnotation on a chunk Secret is the sha256 of its bytes,
	// as the index names it.
	ChunkDigestAnnotation = "fleet.cattle.io/chunk-sha256"
)

// contentComplete reports whether the content Secret whose metadata is m
// holds manifests contentID and every chunk it names exists, per the
// metadata cache.
func (r *Reconciler) contentComplete(ctx context.Context, m *metav1.PartialObjectMetadata, bd, contentID string) (bool, error) {
	if m == nil || m.Annotations[ManifestIDAnnotation] != contentID {
		return false, nil
	}
	n, _ := strconv.Atoi(m.Annotations[ChunksAnnotation])
	for i := range n {
		c, err := r.secretMeta(ctx, m.Namespace, bundlecontent.ChunkSecretName(bd, contentID, i))
		if err != nil || c == nil || c.Annotations[ManifestIDAnnotation] != contentID {
			return false, err
		}
	}
	return true, nil
}

// secretMeta returns a Secret's metadata from the metadata cache (nil: there
// is none).
func (r *Reconciler) secretMeta(ctx context.Context, namespace, name string) (*metav1.PartialObjectMetadata, error) {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	err := r.Cache.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, m)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return m, nil
}

// writeChunks creates the chunk Secrets of enc that do not exist yet,
// controlled by bd (they go with it). A chunk Secret is immutable: one that
// exists under its name with its content's annotations was written by an
// earlier pass; a Secret of that name that is not this chunk is an error
// that names it.
func (r *Reconciler) writeChunks(ctx context.Context, bd *fleet.BundleDeployment, enc *bundlecontent.Encoded) error {
	for i, c := range enc.Chunks {
		m, err := r.secretMeta(ctx, bd.Namespace, c.Name)
		if err != nil {
			return err
		}
		if m != nil && isChunkOf(m, bd, enc.ManifestID, c.SHA256) {
			continue
		}
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: bd.Namespace,
				Name:      c.Name,
				Labels: map[string]string{
					ContentLabel:               "true",
					bundlecontent.ChunkLabel:   "true",
					fleet.ManagedLabel:         "true",
					fleet.BundleLabel:          bd.Labels[fleet.BundleLabel],
					fleet.BundleNamespaceLabel: bd.Labels[fleet.BundleNamespaceLabel],
				},
				Annotations: map[string]string{ManifestIDAnnotation: enc.ManifestID, ChunkDigestAnnotation: c.SHA256},
			},
			Type:      bundlecontent.ChunkSecretType,
			Immutable: ptr.To(true),
			Data:      map[string][]byte{bundlecontent.KeyChunk: c.Data},
		}
		if err := controllerutil.SetControllerReference(bd, s, r.Client.Scheme()); err != nil {
			return fmt.Errorf("writing chunk %d of content Secret %s/%s: %w", i, bd.Namespace, bd.Name, err)
		}
		err = r.Client.Create(ctx, s, client.FieldOwner(reconciler.FieldManager))
		if apierrors.IsAlreadyExists(err) {
			err = r.checkExistingChunk(ctx, bd, enc.ManifestID, c)
		}
		if err != nil {
			return fmt.Errorf("writing chunk %d of content Secret %s/%s: %w", i, bd.Namespace, bd.Name, err)
		}
	}
	return nil
}

// checkExistingChunk looks past the cache at a chunk Secret that exists
// already: it is this chunk (the cache was behind), or the error names what
// is in the way.
func (r *Reconciler) checkExistingChunk(ctx context.Context, bd *fleet.BundleDeployment, manifestID string, c bundlecontent.Chunk) error {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	if err := r.reader().Get(ctx, client.ObjectKey{Namespace: bd.Namespace, Name: c.Name}, m); err != nil {
		return err
	}
	if isChunkOf(m, bd, manifestID, c.SHA256) {
		return nil
	}
	return fmt.Errorf("Secret %s/%s exists and is not this chunk (labels %s and annotations %s of Bundle %s/%s, sha256 %s): delete it, or rename the Bundle whose content Secret has that name",
		bd.Namespace, c.Name, bundlecontent.ChunkLabel, ChunkDigestAnnotation, bd.Labels[fleet.BundleNamespaceLabel], bd.Labels[fleet.BundleLabel], c.SHA256)
}

func (r *Reconciler) reader() client.Reader {
	if r.apiReader != nil {
		return r.apiReader
	}
	return r.Client
}

// isChunkOf reports whether a Secret's metadata says it is the chunk of the
// given digest of content manifestID of bd's Bundle.
func isChunkOf(m *metav1.PartialObjectMetadata, bd *fleet.BundleDeployment, manifestID, sha string) bool {
	l, a := m.Labels, m.Annotations
	return l[bundlecontent.ChunkLabel] == "true" && l[fleet.BundleLabel] == bd.Labels[fleet.BundleLabel] &&
		l[fleet.BundleNamespaceLabel] == bd.Labels[fleet.BundleNamespaceLabel] &&
		a[ManifestIDAnnotation] == manifestID && a[ChunkDigestAnnotation] == sha && m.DeletionTimestamp.IsZero()
}

// collectChunks deletes the chunk Secrets of bd that belong to other content
// than keep, the content its content Secret holds: chunks of the content
// before, or of a pass that stopped before its index was written.
func (r *Reconciler) collectChunks(ctx context.Context, bd *fleet.BundleDeployment, keep string) error {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("SecretList"))
	err := r.Cache.List(ctx, list, client.InNamespace(bd.Namespace), client.MatchingLabels{
		bundlecontent.ChunkLabel:   "true",
		fleet.BundleLabel:          bd.Labels[fleet.BundleLabel],
		fleet.BundleNamespaceLabel: bd.Labels[fleet.BundleNamespaceLabel],
	})
	if err != nil {
		return err
	}
	for i := range list.Items {
		m := &list.Items[i]
		if m.Annotations[ManifestIDAnnotation] == keep || !m.DeletionTimestamp.IsZero() {
			continue
		}
		m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
		if err := r.Client.Delete(ctx, m, client.Preconditions{UID: &m.UID}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("deleting chunk Secret %s/%s of earlier content: %w", m.Namespace, m.Name, err)
		}
	}
	return nil
}

// encodingsKept is how many encodings encodingCache keeps: those of the
// Bundles being written right now.
const encodingsKept = 8

// encodingCache keeps the latest encodings of content, so the clusters of
// one render share one gzip (a 20 MB chart takes a second to compress)
// instead of compressing it again per cluster. An encoding depends only on
// the BundleDeployment's name (the chunks' names) and the manifests.
type encodingCache struct {
	mu    sync.Mutex
	byKey map[string]*encoding
	order []string
}

type encoding struct {
	once sync.Once
	enc  *bundlecontent.Encoded
	err  error
}

func (c *encodingCache) encode(bd, manifestID string, manifests []byte) (*bundlecontent.Encoded, error) {
	key := bd + "\x00" + manifestID
	c.mu.Lock()
	e, ok := c.byKey[key]
	if !ok {
		if c.byKey == nil {
			c.byKey = map[string]*encoding{}
		}
		e = &encoding{}
		c.byKey[key] = e
		c.order = append(c.order, key)
		if len(c.order) > encodingsKept {
			delete(c.byKey, c.order[0])
			c.order = c.order[1:]
		}
	}
	c.mu.Unlock()
	e.once.Do(func() { e.enc, e.err = bundlecontent.EncodeContent(bd, manifests) })
	return e.enc, e.err
}
