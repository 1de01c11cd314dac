package bundle

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/reconciler"
	"github.com/gitops-fleet/fleet/internal/renderworker"
	"github.com/gitops-fleet/fleet/internal/valuessecret"
	"github.com/gitops-fleet/fleet/renderer"
)

// The per-cluster inputs of a Bundle's Helm values. The controller never
// executes the `${ }` templates (the Bundle author's code): it parses them to
// learn which parts of a Cluster they read (renderer.TemplateReads) and
// sends a render only those parts, so clusters that look alike to the
// templates share one render. helm.valuesFrom is read here, upstream, in
// the Bundle's own namespace only, and sent with the render; the content
// lands in the clusters' content Secrets and nowhere else.

// ConfigMapPoll is how often a Bundle whose valuesFrom names a ConfigMap is
// reconciled to see a change of it: the controller caches no ConfigMaps of
// workspaces (Secrets are watched, by their metadata).
const ConfigMapPoll = time.Minute

// valuesInputs computes, during one reconcile of one Bundle, the values
// inputs of each cluster: what the templates read is parsed once per set of
// options, each valuesFrom source read once.
type valuesInputs struct {
	reader client.Reader
	bundle *fleet.Bundle
	reads  map[string]renderer.Reads
	// sources are the valuesFrom reads by reference: content or failure.
	sources map[renderer.ValuesFromRef]sourceRead
}

type sourceRead struct {
	src  renderer.ValuesSource
	fail *renderworker.RenderError
}

func newValuesInputs(reader client.Reader, b *fleet.Bundle) *valuesInputs {
	return &valuesInputs{reader: reader, bundle: b, reads: map[string]renderer.Reads{}, sources: map[renderer.ValuesFromRef]sourceRead{}}
}

// forCluster returns the values inputs of cluster c (nil: the Bundle's own
// options, no cluster) with opts, the Bundle's failure to fix when a
// valuesFrom source cannot be used, or an error of the controller's own.
func (v *valuesInputs) forCluster(ctx context.Context, c *fleet.Cluster, opts fleet.BundleDeploymentOptions, optsHash string) (*renderer.ClusterValues, *renderworker.RenderError, error) {
	out := &renderer.ClusterValues{}
	if c != nil {
		reads, ok := v.reads[optsHash]
		if !ok {
			reads = renderer.TemplateReads(opts)
			v.reads[optsHash] = reads
		}
		out.Cluster = renderer.ContextOf(c).Only(reads)
	}
	for _, ref := range renderer.ValuesFromRefs(opts.Helm, v.bundle.Namespace) {
		read, ok := v.sources[ref]
		if !ok {
			var err error
			if read, err = v.read(ctx, ref); err != nil {
				return nil, nil, err
			}
			v.sources[ref] = read
		}
		if read.fail != nil {
			return nil, read.fail, nil
		}
		out.ValuesFrom = append(out.ValuesFrom, read.src)
	}
	if out.Cluster == nil && len(out.ValuesFrom) == 0 {
		return nil, nil, nil
	}
	return out, nil, nil
}

// read reads one valuesFrom source.
func (v *valuesInputs) read(ctx context.Context, ref renderer.ValuesFromRef) (sourceRead, error) {
	src, fail, err := ReadValuesSource(ctx, v.reader, v.bundle.Namespace, ref)
	return sourceRead{src: src, fail: fail}, err
}

// ReadValuesSource reads one helm.valuesFrom source of a Bundle in
// namespace bundleNamespace, as the controller does (and `fleet render
// bundle` with an upstream): only in the Bundle's own namespace, since a
// Bundle author may not make the controller read another workspace's
// Secrets into their clusters. fail is the Bundle's to fix (another
// namespace, no such object or key); err is the reader's (unreachable,
// forbidden).
func ReadValuesSource(ctx context.Context, reader client.Reader, bundleNamespace string, ref renderer.ValuesFromRef) (src renderer.ValuesSource, fail *renderworker.RenderError, err error) {
	what := fmt.Sprintf("helm.valuesFrom: %s %s/%s", ref.Kind, ref.Namespace, ref.Name)
	if ref.Namespace != bundleNamespace {
		return src, &renderworker.RenderError{Reason: fleet.ValuesFromNotAllowedReason, Message: fmt.Sprintf(
			"%s: valuesFrom is read only from the Bundle's own namespace %s (Fleet reads it downstream; fleet reads it upstream, where another namespace is another workspace): copy the %s into %s, or leave namespace empty",
			what, bundleNamespace, ref.Kind, bundleNamespace)}, nil
	}
	key := types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}
	var data []byte
	var found bool
	switch ref.Kind {
	case "Secret":
		s := &corev1.Secret{}
		if err = reader.Get(ctx, key, s); err == nil {
			data, found = s.Data[ref.Key]
		}
	default:
		cm := &corev1.ConfigMap{}
		if err = reader.Get(ctx, key, cm); err == nil {
			var str string
			if str, found = cm.Data[ref.Key]; found {
				data = []byte(str)
			} else {
				data, found = cm.BinaryData[ref.Key]
			}
		}
	}
	switch {
	case apierrors.IsNotFound(err):
		return src, &renderworker.RenderError{Reason: fleet.ValuesFromInvalidReason, Message: what + " does not exist"}, nil
	case err != nil:
		return src, nil, fmt.Errorf("reading %s: %w", what, err)
	case !found:
		return src, &renderworker.RenderError{Reason: fleet.ValuesFromInvalidReason, Message: fmt.Sprintf("%s has no key %s", what, ref.Key)}, nil
	}
	return renderer.ValuesSource{Kind: ref.Kind, Namespace: ref.Namespace, Name: ref.Name, Key: ref.Key, Data: data}, nil, nil
}

// valuesHash identifies the values inputs of a render (with the options'
// hash, its cache key). It stays in memory: the content of valuesFrom
// Secrets is in it.
func valuesHash(v *renderer.ClusterValues) string {
	if v == nil {
		return ""
	}
	data, _ := json.Marshal(v)
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// renderFor returns the render of the Bundle for cluster c (nil: its own
// options) with opts: the templates' part of the cluster and the valuesFrom
// content are part of what is rendered, so clusters share a render when
// they give the same.
func (rr *reconcileRenders) renderFor(ctx context.Context, inputs *valuesInputs, c *fleet.Cluster, opts fleet.BundleDeploymentOptions) (*render, error) {
	h := optionsHash(opts)
	values, fail, err := inputs.forCluster(ctx, c, opts, h)
	if err != nil {
		return nil, err
	}
	if fail != nil {
		// Not cached: the source may appear or change any time.
		key := h + "/failed/" + fail.Reason + fail.Message
		if rd, ok := rr.byHash[key]; ok {
			return rd, nil
		}
		rd := &render{opts: opts, optsHash: key, err: fail}
		rr.byHash[key] = rd
		rr.ordered = append(rr.ordered, rd)
		return rd, nil
	}
	return rr.getWith(ctx, opts, h, values)
}

// usesConfigMaps says whether the Bundle (or a target) reads values from a
// ConfigMap, which is polled (ConfigMapPoll) rather than watched.
func usesConfigMaps(b *fleet.Bundle) bool {
	for _, o := range append([]fleet.BundleDeploymentOptions{b.Spec.BundleDeploymentOptions}, targetOptions(b)...) {
		for _, ref := range renderer.ValuesFromRefs(o.Helm, b.Namespace) {
			if ref.Kind == "ConfigMap" {
				return true
			}
		}
	}
	return false
}

func targetOptions(b *fleet.Bundle) []fleet.BundleDeploymentOptions {
	out := make([]fleet.BundleDeploymentOptions, 0, len(b.Spec.Targets))
	for _, t := range b.Spec.Targets {
		out = append(out, t.BundleDeploymentOptions)
	}
	return out
}

// requeueFor is how soon the Bundle is reconciled again without an event.
func requeueFor(b *fleet.Bundle) time.Duration {
	if usesConfigMaps(b) {
		return ConfigMapPoll
	}
	return 0
}

// bundlesReadingSecret maps a Secret to the Bundles of its namespace whose
// valuesFrom names it, so a change of it renders them again.
func (r *Reconciler) bundlesReadingSecret(ctx context.Context, o client.Object) []reconcile.Request {
	list := &fleet.BundleList{}
	if err := r.Client.List(ctx, list, client.InNamespace(o.GetNamespace())); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for _, b := range list.Items {
		if readsSecret(&b, o.GetName()) {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: b.Namespace, Name: b.Name}})
		}
	}
	return reqs
}

func readsSecret(b *fleet.Bundle, name string) bool {
	if b.Spec.ValuesHash != "" && name == b.Name {
		return true // its values Secret
	}
	for _, o := range append([]fleet.BundleDeploymentOptions{b.Spec.BundleDeploymentOptions}, targetOptions(b)...) {
		for _, ref := range renderer.ValuesFromRefs(o.Helm, b.Namespace) {
			if ref.Kind == "Secret" && ref.Name == name && ref.Namespace == b.Namespace {
				return true
			}
		}
	}
	return false
}

func (r *Reconciler) valuesReader() client.Reader {
	if r.APIReader != nil {
		return r.APIReader
	}
	return r.Client
}

// templateContextChanged says whether a Cluster changed in what `${ }`
// templates read besides its labels: annotations, spec.templateValues.
func templateContextChanged(o, n *fleet.Cluster) bool {
	return !equalLabels(o.Annotations, n.Annotations) || !equality.Semantic.DeepEqual(o.Spec.TemplateValues, n.Spec.TemplateValues)
}

// withValuesSecret returns the Bundle to render: b itself, or, when it sets
// spec.valuesHash (Fleet's fleet apply moved its Helm values into a Secret
// named like it), a copy with the values of that Secret. The Secret is read
// uncached, like valuesFrom's, and its watch brings the Bundle back. A
// Secret not written yet, or not yet with the values the hash names, is
// waited for; one that is not a values Secret stalls the Bundle.
func (r *Reconciler) withValuesSecret(ctx context.Context, b *fleet.Bundle) (*fleet.Bundle, error) {
	if b.Spec.ValuesHash == "" {
		return b, nil
	}
	s := &corev1.Secret{}
	err := r.valuesReader().Get(ctx, types.NamespacedName{Namespace: b.Namespace, Name: b.Name}, s)
	var p *valuessecret.Problem
	switch {
	case apierrors.IsNotFound(err):
		p = valuessecret.Missing(b)
	case err != nil:
		return nil, fmt.Errorf("reading the values Secret %s/%s: %w", b.Namespace, b.Name, err)
	default:
		vb, err := valuessecret.Apply(b, s)
		if err == nil {
			return vb, nil
		}
		if !errors.As(err, &p) {
			return nil, err
		}
	}
	if p.Waiting {
		return nil, reconciler.Wait(p.Reason, ConfigMapPoll, "%s", p.Message)
	}
	return nil, reconciler.Stall(p.Reason, "%s", p.Message)
}

// deployedOptions are a cluster's options as its BundleDeployment carries
// them. The values of a values Secret stay out: Fleet moved them out of the
// Bundle so they are not stored in clear, and the content, which is
// rendered with them, is the agent's only input.
func deployedOptions(b *fleet.Bundle, opts fleet.BundleDeploymentOptions) fleet.BundleDeploymentOptions {
	if b.Spec.ValuesHash == "" || opts.Helm == nil || opts.Helm.Values == nil {
		return opts
	}
	out := *opts.DeepCopy()
	out.Helm.Values = nil
	return out
}
