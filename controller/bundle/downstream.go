package bundle

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/bundlecontent"
	"github.com/gitops-fleet/fleet/internal/renderworker"
	"github.com/gitops-fleet/fleet/renderer"
)

// This file holds downstreamResources: Secrets and ConfigMaps of the
// Bundle's own namespace copied into each target cluster. The copies travel
// as part of the deployment's content (the content Secret, readable only by
// that cluster's agent), so the agent applies, prunes and watches them for
// drift like any object of the Bundle, into the deployment's namespace; a
// change of a source changes the content, hence the deployment ID, and the
// agent applies the new copy. Their data never reaches a BundleDeployment,
// a status, an event or a log.

const (
	// DownstreamResourceMissingReason: a downstream resource does not
	// exist in the Bundle's namespace.
	DownstreamResourceMissingReason = "DownstreamResourceMissing"
	// DownstreamResourceInvalidReason: a downstream resource names another
	// kind than Secret or ConfigMap, no name, or a Secret that is never
	// copied.
	DownstreamResourceInvalidReason = "DownstreamResourceInvalid"

	// configMapRecheck is how often a Bundle that copies ConfigMaps looks
	// at them again: the controller watches Secrets' metadata, not
	// ConfigMaps (it caches those of its own namespace only).
	configMapRecheck = 30 * time.Second
)

// neverCopied are Secret types that are credentials of the upstream
// itself, never copied downstream whoever names them; nor are content and
// contents Secrets (content goes down as a BundleDeployment's content only).
var neverCopied = []corev1.SecretType{
	corev1.SecretTypeServiceAccountToken, corev1.SecretTypeBootstrapToken, bundlecontent.SecretType,
	bundlecontent.ChunkSecretType, bundlecontent.ContentsSecretType, bundlecontent.ContentsChunkType,
}

// downstreamResources returns every downstream resource the Bundle or one
// of its targets names, each once.
func downstreamResources(b *fleet.Bundle) []fleet.DownstreamResource {
	var out []fleet.DownstreamResource
	add := func(rs []fleet.DownstreamResource) {
		for _, r := range rs {
			if !slices.ContainsFunc(out, func(o fleet.DownstreamResource) bool { return sameResource(o, r) }) {
				out = append(out, r)
			}
		}
	}
	add(b.Spec.DownstreamResources)
	for _, t := range b.Spec.Targets {
		add(t.DownstreamResources)
	}
	return out
}

func sameResource(a, b fleet.DownstreamResource) bool {
	return strings.EqualFold(a.Kind, b.Kind) && a.Name == b.Name
}

// downstreamRecheck is when a Bundle looks at its downstream resources
// again without being told: ConfigMaps are not watched.
func downstreamRecheck(b *fleet.Bundle) time.Duration {
	if slices.ContainsFunc(downstreamResources(b), func(r fleet.DownstreamResource) bool { return strings.EqualFold(r.Kind, "ConfigMap") }) {
		return configMapRecheck
	}
	return 0
}

// downstreamVersions is a hash of the resource versions of the Bundle's
// downstream resources ("" without any): part of the render cache's inputs,
// so a changed, created or deleted source renders the content again.
func (r *Reconciler) downstreamVersions(ctx context.Context, b *fleet.Bundle) (string, error) {
	refs := downstreamResources(b)
	if len(refs) == 0 {
		return "", nil
	}
	h := sha256.New()
	for _, ref := range refs {
		m := &metav1.PartialObjectMetadata{}
		m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind(canonicalKind(ref.Kind)))
		err := r.apiReader.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: ref.Name}, m)
		switch {
		case apierrors.IsNotFound(err), canonicalKind(ref.Kind) == "", ref.Name == "":
			fmt.Fprintf(h, "%s/%s=-\n", ref.Kind, ref.Name)
		case err != nil:
			return "", fmt.Errorf("reading downstream resource %s %s/%s: %w", ref.Kind, b.Namespace, ref.Name, err)
		default:
			fmt.Fprintf(h, "%s/%s=%s\n", ref.Kind, ref.Name, m.ResourceVersion)
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// canonicalKind is Secret or ConfigMap for a kind Fleet accepts (any
// case), else "".
func canonicalKind(kind string) string {
	switch strings.ToLower(kind) {
	case "secret":
		return "Secret"
	case "configmap":
		return "ConfigMap"
	}
	return ""
}

// downstreamRenderer adds the copies of the options' downstream resources,
// read from the Bundle's namespace, to what the Bundle renders to.
type downstreamRenderer struct {
	BundleRenderer
	reader    client.Reader
	namespace string
	// refused are Secrets of the workspace that are never copied: the
	// kubeconfig Secrets of its Clusters.
	refused map[string]bool
}

func (r *Reconciler) downstreamRenderer(b *fleet.Bundle, clusters []fleet.Cluster) BundleRenderer {
	if len(downstreamResources(b)) == 0 {
		return r.Renderer
	}
	refused := map[string]bool{}
	for _, c := range clusters {
		if c.Spec.KubeConfigSecret != "" && (c.Spec.KubeConfigSecretNamespace == "" || c.Spec.KubeConfigSecretNamespace == b.Namespace) {
			refused[c.Spec.KubeConfigSecret] = true
		}
	}
	return &downstreamRenderer{BundleRenderer: r.Renderer, reader: r.apiReader, namespace: b.Namespace, refused: refused}
}

func (d *downstreamRenderer) RenderFor(ctx context.Context, name string, resources []fleet.BundleResource, opts fleet.BundleDeploymentOptions, values *renderer.ClusterValues) (*renderer.Output, error) {
	out, err := d.BundleRenderer.RenderFor(ctx, name, resources, opts, values)
	if err != nil || len(opts.DownstreamResources) == 0 {
		return out, err
	}
	var b bytes.Buffer
	for _, ref := range opts.DownstreamResources {
		doc, err := d.copyOf(ctx, ref)
		if err != nil {
			return nil, err
		}
		b.WriteString("---\n")
		b.Write(doc)
		b.WriteString("\n")
	}
	// The copies are ordinary objects: the main phase, when the content
	// has phases (hooks or CRDs).
	content, err := bundlecontent.AppendToMain(out.YAML, b.Bytes())
	if err != nil {
		return nil, err
	}
	return &renderer.Output{YAML: content}, nil
}

// soonest is the sooner of two requeue delays, 0 meaning none.
func soonest(a, b time.Duration) time.Duration {
	if a == 0 || (b != 0 && b < a) {
		return b
	}
	return a
}

// copyOf returns the copy of one downstream resource as a JSON document:
// name, type, labels and data; no namespace (the agent puts it in the
// deployment's namespace), nothing of the source's metadata that belongs
// to the upstream (owners, annotations, managed fields). A missing or
// refused source is a *renderworker.RenderError that names it and never
// holds its data.
func (d *downstreamRenderer) copyOf(ctx context.Context, ref fleet.DownstreamResource) ([]byte, error) {
	key := client.ObjectKey{Namespace: d.namespace, Name: ref.Name}
	if ref.Name == "" {
		return nil, &renderworker.RenderError{Reason: DownstreamResourceInvalidReason, Message: fmt.Sprintf("downstreamResources: an entry of kind %q has no name", ref.Kind)}
	}
	missing := func() error {
		return &renderworker.RenderError{Reason: DownstreamResourceMissingReason, Message: fmt.Sprintf("downstreamResources: %s %s/%s does not exist in the Bundle's namespace: create it, or remove it from downstreamResources", canonicalKind(ref.Kind), key.Namespace, key.Name)}
	}
	var obj any
	switch canonicalKind(ref.Kind) {
	case "Secret":
		s := &corev1.Secret{}
		if err := d.reader.Get(ctx, key, s); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, missing()
			}
			return nil, fmt.Errorf("reading downstream resource Secret %s: %w", key, err)
		}
		if slices.Contains(neverCopied, s.Type) || d.refused[s.Name] || hasFleetLabel(s.Labels) || holdsDecryptionKey(s.Data) {
			return nil, &renderworker.RenderError{Reason: DownstreamResourceInvalidReason, Message: fmt.Sprintf("downstreamResources: Secret %s is a credential of the upstream (its type %q, a Cluster's kubeconfig, a SOPS decryption key or a fleet Secret) and is never copied downstream: copy another Secret", key, s.Type)}
		}
		obj = &corev1.Secret{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: metav1.ObjectMeta{Name: s.Name, Labels: s.Labels},
			Type:       s.Type, Data: s.Data, Immutable: s.Immutable,
		}
	case "ConfigMap":
		c := &corev1.ConfigMap{}
		if err := d.reader.Get(ctx, key, c); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, missing()
			}
			return nil, fmt.Errorf("reading downstream resource ConfigMap %s: %w", key, err)
		}
		obj = &corev1.ConfigMap{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Name: c.Name, Labels: c.Labels},
			Data:       c.Data, BinaryData: c.BinaryData, Immutable: c.Immutable,
		}
	default:
		return nil, &renderworker.RenderError{Reason: DownstreamResourceInvalidReason, Message: fmt.Sprintf("downstreamResources: kind %q of %s is not Secret or ConfigMap", ref.Kind, ref.Name)}
	}
	doc, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("encoding the copy of %s %s: %w", ref.Kind, key, err)
	}
	return stripCreationTimestamp(doc), nil
}

// hasFleetLabel reports whether a Secret carries a label of fleet's own
// (fleet.cattle.io/...): the controller's Secrets (content, credentials,
// token values) are never copied.
func hasFleetLabel(l map[string]string) bool {
	for k := range l {
		if strings.HasPrefix(k, fleet.GroupVersion.Group+"/") {
			return true
		}
	}
	return false
}

// holdsDecryptionKey reports whether a Secret holds age identities the
// source component decrypts GitRepos' SOPS files with (a data key ending in
// ".agekey", gitops/decrypt's KeySuffix): a Bundle author would otherwise
// get the key of every encrypted file of the workspace onto a cluster.
func holdsDecryptionKey(data map[string][]byte) bool {
	for k := range data {
		if strings.HasSuffix(k, ".agekey") {
			return true
		}
	}
	return false
}

// stripCreationTimestamp drops the null creationTimestamp json.Marshal
// writes for an empty ObjectMeta.
func stripCreationTimestamp(doc []byte) []byte {
	return bytes.Replace(doc, []byte(`"creationTimestamp":null,`), nil, 1)
}

// bundlesCopying maps a Secret to the Bundles of its namespace that copy it
// downstream.
func (r *Reconciler) bundlesCopying(ctx context.Context, o client.Object) []reconcile.Request {
	list := &fleet.BundleList{}
	if err := r.Client.List(ctx, list, client.InNamespace(o.GetNamespace())); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		b := &list.Items[i]
		if slices.ContainsFunc(downstreamResources(b), func(ref fleet.DownstreamResource) bool {
			return canonicalKind(ref.Kind) == "Secret" && ref.Name == o.GetName()
		}) {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(b)})
		}
	}
	return reqs
}

// addDownstreamInputs makes the versions of the Bundle's downstream
// resources part of the render cache's inputs.
func (r *Reconciler) addDownstreamInputs(ctx context.Context, b *fleet.Bundle, rr *reconcileRenders) error {
	v, err := r.downstreamVersions(ctx, b)
	if err != nil || v == "" {
		return err
	}
	sum := sha256.Sum256([]byte(rr.inputs + "\n" + v))
	rr.inputs = hex.EncodeToString(sum[:])
	return nil
}
