// Package bundle is the Bundle reconciler ("targeting"): it renders a Bundle
// for every Cluster its targets select, writes one BundleDeployment and its
// content Secret per cluster into the cluster namespace, removes those of
// clusters no longer selected, and aggregates their status.
package bundle

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller/sharding"
	"github.com/gitops-fleet/fleet/controller/summary"
	"github.com/gitops-fleet/fleet/internal/bundlecontent"
	"github.com/gitops-fleet/fleet/internal/names"
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

// Reconciler reconciles Bundles.
type Reconciler struct {
	// Shard is this replica's share of the Bundles (zero: all).
	Shard  sharding.Shard
	Client client.Client
	// Cache reads Secret metadata (Secrets themselves are not cached).
	Cache    client.Reader
	Recorder recorder.EventRecorder
}

// Reconcile targets one Bundle.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if !r.Shard.OwnsKey(req.String()) {
		return ctrl.Result{}, nil
	}
	b := &fleet.Bundle{}
	if err := r.Client.Get(ctx, req.NamespacedName, b); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !b.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.reconcileDelete(ctx, b)
	}
	if controllerutil.AddFinalizer(b, fleet.BundleFinalizer) {
		if err := r.Client.Update(ctx, b); err != nil {
			return ctrl.Result{}, err
		}
	}
	orig := b.DeepCopy()
	result, stepErr := r.reconcile(ctx, b)
	if err := r.patchStatus(ctx, orig, b); err != nil {
		return ctrl.Result{}, err
	}
	return result, stepErr
}

// targetError is a problem with the Bundle the user must fix.
type targetError struct{ reason, msg string }

func (e *targetError) Error() string { return e.msg }

func (r *Reconciler) reconcile(ctx context.Context, b *fleet.Bundle) (ctrl.Result, error) {
	files, err := renderer.BundleFiles(b.Spec.Resources)
	if err != nil {
		r.setStalled(b, fleet.RenderFailedReason, fmt.Sprintf("spec.resources: %v", err))
		return ctrl.Result{}, nil
	}
	b.Status.ResourcesSHA256Sum = resourcesHash(b.Spec.Resources)

	clusters := &fleet.ClusterList{}
	if err := r.Client.List(ctx, clusters, client.InNamespace(b.Namespace)); err != nil {
		return ctrl.Result{}, err
	}
	groups := &fleet.ClusterGroupList{}
	if err := r.Client.List(ctx, groups, client.InNamespace(b.Namespace)); err != nil {
		return ctrl.Result{}, err
	}
	existing, err := r.deployments(ctx, b)
	if err != nil {
		return ctrl.Result{}, err
	}

	renders := map[string]*renderResult{}
	keep := map[string]bool{}
	var renderErrs []string
	pending := 0
	sort.Slice(clusters.Items, func(i, j int) bool { return clusters.Items[i].Name < clusters.Items[j].Name })
	for i := range clusters.Items {
		c := &clusters.Items[i]
		if !c.DeletionTimestamp.IsZero() {
			continue
		}
		t, err := matchTarget(b, c, groups.Items)
		if err != nil {
			r.setStalled(b, fleet.TargetsInvalidReason, err.Error())
			return ctrl.Result{}, nil
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
		opts := renderer.MergeOptions(b.Spec.BundleDeploymentOptions, t.BundleDeploymentOptions)
		rr := renderOnce(renders, b, files, opts)
		if rr.err != nil {
			renderErrs = append(renderErrs, fmt.Sprintf("cluster %s: %v", c.Name, rr.err))
			continue
		}
		keep[ns] = true
		if err := r.ensureDeployment(ctx, b, c, ns, opts, rr, existing[ns]); err != nil {
			return ctrl.Result{}, err
		}
	}
	for ns, bd := range existing {
		if keep[ns] {
			continue
		}
		if err := r.Client.Delete(ctx, bd); err != nil && !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
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
	s.Pending = pending
	b.Status.Summary = s
	b.Status.Display.ReadyClusters = fmt.Sprintf("%d/%d", s.Ready, s.DesiredReady)
	b.Status.Display.State = string(summary.WorstState(s))
	b.Status.ObservedGeneration = b.Generation
	meta.RemoveStatusCondition(&b.Status.Conditions, fleet.StalledCondition)
	switch {
	case len(renderErrs) > 0:
		r.setStalled(b, fleet.RenderFailedReason, strings.Join(renderErrs, "; "))
	case s.Ready == s.DesiredReady && pending == 0:
		setCond(b, fleet.ReadyCondition, true, fleet.SucceededReason, "")
		meta.RemoveStatusCondition(&b.Status.Conditions, fleet.ReconcilingCondition)
	default:
		msg := summary.ReadyMessage(s)
		if pending > 0 {
			msg = strings.TrimPrefix(msg+fmt.Sprintf("; %d cluster(s) waiting for their namespace", pending), "; ")
		}
		setCond(b, fleet.ReadyCondition, false, fleet.BundleDeploymentsNotReadyReason, msg)
		setCond(b, fleet.ReconcilingCondition, true, fleet.ProgressingReason, msg)
	}
	return ctrl.Result{}, nil
}

type renderResult struct {
	manifests []byte
	contentID string
	err       error
}

// renderOnce renders the Bundle once per distinct set of options: clusters
// without target customisation share one render.
func renderOnce(cache map[string]*renderResult, b *fleet.Bundle, files map[string][]byte, opts fleet.BundleDeploymentOptions) *renderResult {
	key := optionsHash(opts)
	if rr, ok := cache[key]; ok {
		return rr
	}
	rr := &renderResult{}
	out, err := renderer.RenderFiles(b.Name, files, opts)
	if err != nil {
		rr.err = err
	} else {
		rr.manifests = out.YAML
		rr.contentID = bundlecontent.ManifestID(out.YAML)
	}
	cache[key] = rr
	return rr
}

// ensureDeployment writes the cluster's BundleDeployment, then its content
// Secret (owned by it, so it goes with it). A paused Bundle or Cluster only
// stages the new deployment.
func (r *Reconciler) ensureDeployment(ctx context.Context, b *fleet.Bundle, c *fleet.Cluster, clusterNS string, opts fleet.BundleDeploymentOptions, rr *renderResult, bd *fleet.BundleDeployment) error {
	depID := bundlecontent.DeploymentID(rr.contentID, opts)
	paused := b.Spec.Paused || c.Spec.Paused
	exists := bd != nil
	if !exists {
		bd = &fleet.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: clusterNS, Name: b.Name}}
	}
	want := bd.DeepCopy()
	if want.Labels == nil {
		want.Labels = map[string]string{}
	}
	want.Labels[fleet.BundleLabel] = b.Name
	want.Labels[fleet.BundleNamespaceLabel] = b.Namespace
	want.Labels[fleet.ClusterLabel] = c.Name
	want.Labels[fleet.ClusterNamespaceLabel] = c.Namespace
	want.Labels[fleet.ManagedLabel] = "true"
	want.Spec.StagedDeploymentID = depID
	want.Spec.StagedOptions = opts
	want.Spec.Paused = paused
	if !paused || !exists {
		want.Spec.DeploymentID = depID
		want.Spec.Options = opts
		want.Spec.CorrectDrift = opts.CorrectDrift.DeepCopy()
	}
	switch {
	case !exists:
		if err := r.Client.Create(ctx, want); err != nil {
			return fmt.Errorf("creating BundleDeployment %s/%s: %w", want.Namespace, want.Name, err)
		}
	case !equality.Semantic.DeepEqual(bd.Spec, want.Spec) || !equality.Semantic.DeepEqual(bd.Labels, want.Labels):
		if err := r.Client.Update(ctx, want); err != nil {
			return fmt.Errorf("updating BundleDeployment %s/%s: %w", want.Namespace, want.Name, err)
		}
	}
	if paused && exists {
		return nil // the content of the deployment in force stays
	}
	return r.ensureContent(ctx, want, rr)
}

// ensureContent writes the content Secret when the metadata cache says it is
// missing or holds other manifests.
func (r *Reconciler) ensureContent(ctx context.Context, bd *fleet.BundleDeployment, rr *renderResult) error {
	key := client.ObjectKey{Namespace: bd.Namespace, Name: bundlecontent.SecretName(bd.Name)}
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	err := r.Cache.Get(ctx, key, m)
	if err == nil && m.Annotations[ManifestIDAnnotation] == rr.contentID {
		return nil
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	data, err := bundlecontent.Encode(rr.manifests)
	if err != nil {
		return err
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	_, err = controllerutil.CreateOrUpdate(ctx, r.Client, s, func() error {
		s.Type = bundlecontent.SecretType
		s.Data = data
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
		s.Annotations[ManifestIDAnnotation] = rr.contentID
		return controllerutil.SetControllerReference(bd, s, r.Client.Scheme())
	})
	if err != nil {
		return fmt.Errorf("writing content Secret %s: %w", key, err)
	}
	return nil
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
	controllerutil.RemoveFinalizer(b, fleet.BundleFinalizer)
	return client.IgnoreNotFound(r.Client.Update(ctx, b))
}

func (r *Reconciler) patchStatus(ctx context.Context, orig, b *fleet.Bundle) error {
	if equality.Semantic.DeepEqual(orig.Status, b.Status) {
		return nil
	}
	if err := r.Client.Status().Patch(ctx, b, client.MergeFrom(orig)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("patching status of bundle %s/%s: %w", b.Namespace, b.Name, err)
	}
	return nil
}

func (r *Reconciler) setStalled(b *fleet.Bundle, reason, msg string) {
	setCond(b, fleet.ReadyCondition, false, reason, msg)
	setCond(b, fleet.StalledCondition, true, reason, msg)
	meta.RemoveStatusCondition(&b.Status.Conditions, fleet.ReconcilingCondition)
}

func setCond(b *fleet.Bundle, t string, ok bool, reason, msg string) {
	s := metav1.ConditionFalse
	if ok {
		s = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg, ObservedGeneration: b.Generation})
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
