// Package bundle is the Bundle reconciler ("targeting"): it renders a Bundle
// for every Cluster its targets select, writes one BundleDeployment and its
// content Secret per cluster into the cluster namespace, removes those of
// clusters no longer selected, and aggregates their status.
package bundle

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller/bundlerollout"
	"github.com/gitops-fleet/fleet/controller/sharding"
	"github.com/gitops-fleet/fleet/controller/summary"
	"github.com/gitops-fleet/fleet/internal/bundlecontent"
	"github.com/gitops-fleet/fleet/internal/bundleoptions"
	"github.com/gitops-fleet/fleet/internal/names"
	"github.com/gitops-fleet/fleet/internal/reconciler"
	"github.com/gitops-fleet/fleet/internal/targeting"
	"github.com/gitops-fleet/fleet/renderer"
)

const (
	// ManifestIDAnnotation on a content Secret names the manifests it holds,
	// so the controller can tell from the metadata cache whether it is
	// current.
	ManifestIDAnnotation = "fleet.cattle.io/manifest-id"
	// ContentLabel marks content Secrets.
	ContentLabel = "fleet.cattle.io/bundle-content"
)

// DefaultWriters is how many clusters' BundleDeployments and content
// Secrets one reconcile writes at once unless Reconciler.Writers says
// otherwise. Each cluster costs two dependent writes, so a Bundle change's
// throughput is Writers / (2 × the upstream's write latency) until the
// upstream API server saturates: measured on 2 cores (fleet-dev bench
// --only fleet --clusters 2000), 8 writers changed a Bundle on 2,000
// clusters in 56 s, 32 in 47 s, the API server then being the limit.
const DefaultWriters = 32

// statusRules are the Bundle's kstatus rules: Ready says whether every
// selected cluster has it Ready. A Bundle that does not render, or whose
// targets are invalid, is Stalled (its author must act); one whose
// BundleDeployments are not all Ready yet waits on the agents.
var statusRules = reconciler.Conditions{Ready: fleet.ReadyCondition, Failing: "targeting the Bundle's clusters failed"}

// Reconciler reconciles Bundles.
type Reconciler struct {
	// Shard is this replica's share of the Bundles (zero: all).
	Shard  sharding.Shard
	Client client.Client
	// Cache reads Secret metadata (Secrets themselves are not cached).
	Cache    client.Reader
	Recorder recorder.EventRecorder
	// Renderer renders the Bundles' content (render workers).
	Renderer BundleRenderer
	// APIReader reads helm.valuesFrom ConfigMaps and Secrets (not cached);
	// nil: Client.
	APIReader client.Reader
	// Writers is how many clusters one reconcile writes at once (zero:
	// DefaultWriters).
	Writers int

	// rendered remembers what the Bundles' renders gave.
	rendered renderCache
	// encodings shares a content's gzip and chunks between clusters.
	encodings encodingCache
	// apiReader reads downstreamResources' sources uncached (downstream.go).
	apiReader client.Reader
}

// Reconcile targets one Bundle.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if !r.Shard.OwnsKey(req.String()) {
		return ctrl.Result{}, nil
	}
	b := &fleet.Bundle{}
	if err := r.Client.Get(ctx, req.NamespacedName, b); err != nil {
		if apierrors.IsNotFound(err) {
			r.rendered.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !b.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.reconcileDelete(ctx, b)
	}
	if controllerutil.AddFinalizer(b, fleet.BundleFinalizer) {
		if err := r.Client.Update(ctx, b, client.FieldOwner(reconciler.FieldManager)); err != nil {
			return ctrl.Result{}, err
		}
	}
	patcher, err := reconciler.NewStatusPatcher(r.Client, b, statusRules.Owned()...)
	if err != nil {
		return ctrl.Result{}, err
	}
	out := reconciler.Success(fleet.SucceededReason, "")
	if err := r.reconcile(ctx, b, patcher); err != nil {
		out = reconciler.Failure(err)
	}
	statusRules.Set(b, out, time.Now())
	if err := patcher.Patch(ctx, b); err != nil {
		return reconciler.StatusPatchFailed(ctx, err, out.Err)
	}
	if s := out.Stalled(); s != nil {
		ctrl.LoggerFrom(ctx).V(1).Info("bundle is stalled", "reason", s.Reason)
	}
	// Stalled and waiting Bundles come back through their watches: a
	// change of the Bundle, its Clusters or its BundleDeployments.
	return out.Result(soonest(downstreamRecheck(b), requeueFor(b)))
}

// placement is one selected cluster and what it gets.
type placement struct {
	cluster *fleet.Cluster
	// namespace is the cluster namespace, derived from the Cluster's name.
	namespace string
	// opts are the options as its BundleDeployment carries them
	// (deployedOptions); render was made with the values too.
	opts   fleet.BundleDeploymentOptions
	render *render
	bd     *fleet.BundleDeployment // nil: none yet
	// step is what the rollout strategy lets this pass do to bd; held: it
	// keeps a deployment other than the Bundle's.
	step bundlerollout.Step
	held bool
}

// isAgentBundleFor reports whether b is the agent Bundle the controller made
// for cluster c (controller/cluster): labelled fleet.AgentBundleLabel, named
// fleet-agent-<c> and controlled by that very Cluster (its UID). Only the
// BundleDeployment of such a Bundle, for that cluster, carries the label,
// which the agent's deployer recognises its own Bundle by; a Bundle author
// cannot give it to their Bundle.
func isAgentBundleFor(b *fleet.Bundle, c *fleet.Cluster) bool {
	if b.Labels[fleet.AgentBundleLabel] != "true" || b.Name != names.AgentBundle(c.Name) {
		return false
	}
	ref := metav1.GetControllerOf(b)
	return ref != nil && ref.APIVersion == fleet.GroupVersion.String() && ref.Kind == "Cluster" && ref.Name == c.Name && ref.UID == c.UID
}

// keepsContent reports whether the content in force stays: a paused Bundle
// or Cluster only stages a new deployment, and so does a cluster the
// rollout holds back.
func (p *placement) keepsContent(b *fleet.Bundle) bool {
	return p.bd != nil && (b.Spec.Paused || p.cluster.Spec.Paused || p.held)
}

// reconcile targets the Bundle's clusters and fills its status, except the
// conditions: it returns nil when every selected cluster has the Bundle
// Ready, a *reconciler.Stalled when the Bundle's targets are invalid or it
// does not render, a *reconciler.Waiting while BundleDeployments are not
// Ready or clusters wait for their namespace, or a transient error.
//
// A pass with many writes writes progress through patcher meanwhile
// (progress.go).
func (r *Reconciler) reconcile(ctx context.Context, b *fleet.Bundle, patcher *reconciler.StatusPatcher) error {
	b.Status.ResourcesSHA256Sum = bundleResourcesHash(b)
	if err := bundleoptions.Check(&b.Spec); err != nil {
		// Deploying without the option would deploy something else:
		// nothing of this generation is deployed.
		b.Status.ObservedGeneration = b.Generation
		return reconciler.Stall(fleet.UnsupportedOptionReason, "%v", err)
	}
	if err := checkContentsID(b); err != nil {
		b.Status.ObservedGeneration = b.Generation
		return err
	}
	// vb is the Bundle as rendered: with spec.valuesHash, its Helm values
	// come from its values Secret, in memory only.
	vb, err := r.withValuesSecret(ctx, b)
	if err != nil {
		b.Status.ObservedGeneration = b.Generation
		return err
	}

	clusters := &fleet.ClusterList{}
	if err := r.Client.List(ctx, clusters, client.InNamespace(b.Namespace)); err != nil {
		return err
	}
	groups := &fleet.ClusterGroupList{}
	if err := r.Client.List(ctx, groups, client.InNamespace(b.Namespace)); err != nil {
		return err
	}
	existing, err := r.deployments(ctx, b)
	if err != nil {
		return err
	}

	// Render once per distinct set of options: clusters without target
	// customisation share one render.
	renders := newReconcileRenders(r.downstreamRenderer(b, clusters.Items), &r.rendered, b, r.resourcesOf(b))
	if err := r.addDownstreamInputs(ctx, b, renders); err != nil {
		return err
	}
	inputs := newValuesInputs(r.valuesReader(), b)
	var placements []*placement
	failed := map[*render][]string{} // failed renders, with their clusters
	keep := map[string]bool{}        // cluster namespaces whose BundleDeployment stays
	pending := 0
	sort.Slice(clusters.Items, func(i, j int) bool { return clusters.Items[i].Name < clusters.Items[j].Name })
	for i := range clusters.Items {
		c := &clusters.Items[i]
		if !c.DeletionTimestamp.IsZero() {
			continue
		}
		opts, t, err := renderer.OptionsFor(vb, c, targeting.Groups{Items: groups.Items})
		if err != nil {
			return reconciler.Stall(fleet.TargetsInvalidReason, "%v", err)
		}
		if t == nil || t.DoNotDeploy {
			continue
		}
		// The cluster namespace comes from the Cluster's name, never from
		// its status. The status only says the Cluster reconciler has made
		// the namespace (it writes this very name once it exists).
		ns := names.ClusterNamespace(c.Namespace, c.Name)
		if c.Status.Namespace != ns {
			pending++
			continue
		}
		rd, err := renders.renderFor(ctx, inputs, c, opts)
		if err != nil {
			return err
		}
		if rd.err != nil {
			failed[rd] = append(failed[rd], c.Name)
			keep[ns] = true // the last deployment stays until the Bundle renders again
			continue
		}
		placements = append(placements, &placement{cluster: c, namespace: ns, opts: deployedOptions(b, opts), render: rd, bd: existing[ns]})
	}
	// No cluster to render for: render the Bundle's own options, so a
	// Bundle that cannot render says so before it targets anything.
	if len(renders.ordered) == 0 {
		rd, err := renders.renderFor(ctx, inputs, nil, vb.Spec.BundleDeploymentOptions)
		if err != nil {
			return err
		}
		if rd.err != nil {
			failed[rd] = nil
		}
	}

	rollout, err := planRollout(b, placements, targeting.Groups{Items: groups.Items})
	if err != nil {
		return err
	}
	if err := r.renderStaleContent(ctx, renders, placements, b); err != nil {
		return err
	}
	var writes []*placement
	for _, p := range placements {
		keep[p.namespace] = true
		if p.render.err != nil { // the render that refreshed the content failed
			failed[p.render] = append(failed[p.render], p.cluster.Name)
			continue
		}
		if p.step == bundlerollout.Skip {
			continue // not created in this pass
		}
		writes = append(writes, p)
	}
	// A Bundle on thousands of clusters writes thousands of
	// BundleDeployments and content Secrets: several at a time.
	written := make([]*fleet.BundleDeployment, len(writes))
	pr := r.startProgress(ctx, b, patcher, writes, renders, keep, existing, pending)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(cmp.Or(r.Writers, DefaultWriters))
	for i, p := range writes {
		g.Go(func() error {
			bd, err := r.ensureDeployment(gctx, b, p, renders)
			written[i] = bd
			if err == nil {
				pr.add(bd)
			}
			return err
		})
	}
	err = g.Wait()
	pr.end(b)
	if err != nil {
		return err
	}
	// The status below counts what was just written: a changed
	// deployment is not Ready until its agent applies it.
	for i, p := range writes {
		existing[p.namespace] = written[i]
	}
	for ns, bd := range existing {
		if keep[ns] {
			continue
		}
		if err := r.Client.Delete(ctx, bd); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		delete(existing, ns)
	}

	// Status from the BundleDeployments as last seen; their status changes
	// bring us back here.
	var bds []fleet.BundleDeployment
	for ns := range keep {
		if bd := existing[ns]; bd != nil {
			bds = append(bds, *bd)
		}
	}
	s := summary.Summarize(bds)
	s.DesiredReady = len(keep)
	held, skipped := rollout.status(b, placements, existing)
	s.Pending = pending + skipped
	b.Status.Summary = s
	b.Status.ResourceCounts = summary.ResourceCounts(bds)
	b.Status.ResourceKey = bundleResourceKey(renders.ordered)
	b.Status.Display.ReadyClusters = fmt.Sprintf("%d/%d", s.Ready, s.DesiredReady)
	b.Status.Display.State = string(summary.WorstState(s))
	b.Status.ObservedGeneration = b.Generation
	switch {
	case len(failed) > 0:
		reason, msg := renderFailures(renders.ordered, failed)
		return reconciler.Stall(reason, "%s", msg)
	case held > 0:
		return rollout.held(b, held, s)
	case s.Ready == s.DesiredReady && pending == 0:
		return nil
	default:
		msg := summary.ReadyMessage(s)
		if pending > 0 {
			msg = strings.TrimPrefix(msg+fmt.Sprintf("; %d cluster(s) waiting for their namespace", pending), "; ")
		}
		return reconciler.Wait(fleet.BundleDeploymentsNotReadyReason, 0, "%s", msg)
	}
}

// renderFailures is the Stalled reason (the first failure's) and message
// (every failure, with the clusters it concerns) of failed renders.
func renderFailures(ordered []*render, failed map[*render][]string) (reason, msg string) {
	var parts []string
	for _, rd := range ordered {
		clusters, ok := failed[rd]
		if !ok {
			continue
		}
		if reason == "" {
			reason = rd.err.Reason
		}
		switch len(clusters) {
		case 0:
			parts = append(parts, rd.err.Message)
		case 1:
			parts = append(parts, fmt.Sprintf("cluster %s: %s", clusters[0], rd.err.Message))
		default:
			parts = append(parts, fmt.Sprintf("clusters %s: %s", strings.Join(clusters, ", "), rd.err.Message))
		}
	}
	return reason, strings.Join(parts, "; ")
}

// renderStaleContent renders, before any BundleDeployment is written, every
// set of options whose content Secret is missing or out of date on some
// cluster, so all clusters of one set get the same manifest ID even when
// the templates are not deterministic.
func (r *Reconciler) renderStaleContent(ctx context.Context, renders *reconcileRenders, placements []*placement, b *fleet.Bundle) error {
	for _, p := range placements {
		if p.keepsContent(b) || p.render.rendered || p.render.err != nil {
			continue
		}
		current, err := r.contentCurrent(ctx, p.namespace, b.Name, p.render.contentID)
		if err != nil {
			return err
		}
		if !current {
			if err := renders.ensureManifests(ctx, p.render); err != nil {
				return err
			}
		}
	}
	return nil
}

// contentCurrent reports whether, per the metadata cache, a cluster's
// content Secret holds the manifests contentID names.
func (r *Reconciler) contentCurrent(ctx context.Context, namespace, bundle, contentID string) (bool, error) {
	m, err := r.contentMeta(ctx, namespace, bundle)
	if err != nil {
		return false, err
	}
	return r.contentComplete(ctx, m, bundle, contentID)
}

// contentMeta returns a cluster's content Secret's metadata from the
// metadata cache (nil: there is none).
func (r *Reconciler) contentMeta(ctx context.Context, namespace, bundle string) (*metav1.PartialObjectMetadata, error) {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	err := r.Cache.Get(ctx, client.ObjectKey{Namespace: namespace, Name: bundlecontent.SecretName(bundle)}, m)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return m, nil
}

// ensureDeployment writes the cluster's BundleDeployment, then its content
// Secret (owned by it, so it goes with it), and returns the
// BundleDeployment as it now is. A paused Bundle or Cluster only stages the
// new deployment.
func (r *Reconciler) ensureDeployment(ctx context.Context, b *fleet.Bundle, p *placement, renders *reconcileRenders) (*fleet.BundleDeployment, error) {
	c, opts, rd, bd := p.cluster, p.opts, p.render, p.bd
	contentID, _, _ := renders.outcome(rd)
	depID := bundlecontent.DeploymentID(contentID, opts)
	paused := b.Spec.Paused || c.Spec.Paused
	exists := bd != nil
	if !exists {
		bd = &fleet.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: p.namespace, Name: b.Name}}
	}
	want := bd.DeepCopy()
	want.Labels = deploymentLabels(b, c)
	claimed := b.Labels[fleet.AgentBundleLabel] != ""
	if isAgentBundleFor(b, c) {
		want.Labels[fleet.AgentBundleLabel] = "true"
	} else {
		delete(want.Labels, fleet.AgentBundleLabel)
	}
	if p.step != bundlerollout.Keep {
		want.Spec.StagedDeploymentID = depID
		want.Spec.StagedOptions = opts
	}
	want.Spec.Paused = paused
	// dependsOn gates only deployments not yet applied (the agent checks
	// it), so it follows the Bundle at once, whatever the rollout step.
	want.Spec.DependsOn = dependsOn(b)
	if p.step == bundlerollout.Deploy {
		want.Spec.DeploymentID = depID
		want.Spec.Options = opts
		want.Spec.CorrectDrift = opts.CorrectDrift.DeepCopy()
	}
	written := false
	switch {
	case !exists:
		if err := r.Client.Create(ctx, want, client.FieldOwner(reconciler.FieldManager)); err != nil {
			return nil, fmt.Errorf("creating BundleDeployment %s/%s: %w", want.Namespace, want.Name, err)
		}
		written = true
	case !equality.Semantic.DeepEqual(bd.Spec, want.Spec) || !equality.Semantic.DeepEqual(bd.Labels, want.Labels):
		if err := r.Client.Update(ctx, want, client.FieldOwner(reconciler.FieldManager)); err != nil {
			return nil, fmt.Errorf("updating BundleDeployment %s/%s: %w", want.Namespace, want.Name, err)
		}
		written = true
	}
	if written && claimed && want.Labels[fleet.AgentBundleLabel] == "" {
		reconciler.Eventf(r.Recorder, b, nil, corev1.EventTypeWarning, "ReservedLabelIgnored", "Target",
			"label %s is reserved for the agent Bundles the controller makes; it was not passed on to BundleDeployment %s/%s", fleet.AgentBundleLabel, want.Namespace, want.Name)
	}
	if !written {
		want = bd
	}
	if p.keepsContent(b) {
		return want, nil // the content of the deployment in force stays
	}
	return want, r.ensureContent(ctx, want, rd, renders)
}

// ensureContent writes the content Secret when the metadata cache says it is
// missing or holds other manifests. The write is a create, or an update at
// the cached resourceVersion: no read first. A cache behind the server
// makes it fail (AlreadyExists, Conflict), and the retry finds it current.
func (r *Reconciler) ensureContent(ctx context.Context, bd *fleet.BundleDeployment, rr *render, renders *reconcileRenders) error {
	key := client.ObjectKey{Namespace: bd.Namespace, Name: bundlecontent.SecretName(bd.Name)}
	contentID, _, _ := renders.outcome(rr)
	m, err := r.contentMeta(ctx, key.Namespace, bd.Name)
	if err != nil {
		return err
	}
	if current, err := r.contentComplete(ctx, m, bd.Name, contentID); err != nil || current {
		if err == nil {
			err = r.collectChunks(ctx, bd, contentID)
		}
		return err
	}
	if err := renders.ensureManifests(ctx, rr); err != nil {
		return err
	}
	contentID, manifests, renderErr := renders.outcome(rr)
	if renderErr != nil {
		// Rendered before, fails now: the retry finds the failure in the
		// cache and reports it on the Bundle.
		return fmt.Errorf("rendering the content of %s/%s: %w", bd.Namespace, bd.Name, renderErr)
	}
	enc, err := r.encodings.encode(bd.Name, contentID, manifests)
	if err != nil {
		return fmt.Errorf("writing content Secret %s: %w", key, err)
	}
	// Chunks first: the content Secret names them once they exist.
	if err := r.writeChunks(ctx, bd, enc); err != nil {
		return err
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	if m != nil {
		// What others keep on it (labels, annotations, owners) stays.
		s.ObjectMeta = *m.ObjectMeta.DeepCopy()
		s.ManagedFields = nil
	}
	s.Type = bundlecontent.SecretType
	s.Data = enc.Data
	if s.Labels == nil {
		s.Labels = map[string]string{}
	}
	s.Labels[ContentLabel] = "true"
	s.Labels[fleet.ManagedLabel] = "true"
	s.Labels[fleet.BundleLabel] = bd.Labels[fleet.BundleLabel]
	s.Labels[fleet.BundleNamespaceLabel] = bd.Labels[fleet.BundleNamespaceLabel]
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Annotations[ManifestIDAnnotation] = contentID
	delete(s.Annotations, ChunksAnnotation)
	if len(enc.Chunks) > 0 {
		s.Annotations[ChunksAnnotation] = strconv.Itoa(len(enc.Chunks))
	}
	if err := controllerutil.SetControllerReference(bd, s, r.Client.Scheme()); err != nil {
		return fmt.Errorf("writing content Secret %s: %w", key, err)
	}
	if m == nil {
		err = r.Client.Create(ctx, s, client.FieldOwner(reconciler.FieldManager))
	} else {
		err = r.Client.Update(ctx, s, client.FieldOwner(reconciler.FieldManager))
	}
	if err != nil {
		return fmt.Errorf("writing content Secret %s: %w", key, err)
	}
	return r.collectChunks(ctx, bd, contentID)
}

// deployments returns the Bundle's BundleDeployments by cluster namespace.
func (r *Reconciler) deployments(ctx context.Context, b *fleet.Bundle) (map[string]*fleet.BundleDeployment, error) {
	list := &fleet.BundleDeploymentList{}
	if err := r.Client.List(ctx, list, client.MatchingLabels{fleet.BundleLabel: b.Name, fleet.BundleNamespaceLabel: b.Namespace}); err != nil {
		return nil, err
	}
	out := make(map[string]*fleet.BundleDeployment, len(list.Items))
	for i := range list.Items {
		out[list.Items[i].Namespace] = &list.Items[i]
	}
	return out, nil
}

func (r *Reconciler) reconcileDelete(ctx context.Context, b *fleet.Bundle) error {
	if !controllerutil.ContainsFinalizer(b, fleet.BundleFinalizer) {
		return nil
	}
	existing, err := r.deployments(ctx, b)
	if err != nil {
		return err
	}
	var errs []error
	for _, bd := range existing {
		if err := r.Client.Delete(ctx, bd); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	r.rendered.forget(client.ObjectKeyFromObject(b))
	controllerutil.RemoveFinalizer(b, fleet.BundleFinalizer)
	return client.IgnoreNotFound(r.Client.Update(ctx, b, client.FieldOwner(reconciler.FieldManager)))
}

func optionsHash(o fleet.BundleDeploymentOptions) string {
	data, _ := json.Marshal(o)
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

func resourcesHash(res []fleet.BundleResource) string {
	data, _ := json.Marshal(res)
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}
