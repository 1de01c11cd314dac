package deployer

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	"github.com/fluxcd/pkg/ssa"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/gitops-fleet/fleet/agent/deployer/refusal"
	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/bundlecontent"
	"github.com/gitops-fleet/fleet/internal/comparepatch"
	"github.com/gitops-fleet/fleet/internal/reconciler"
)

const (
	// contentRetry is how soon a BundleDeployment waiting for its content is
	// looked at again (the Secret watch usually comes first).
	contentRetry = 5 * time.Second
	// healthPoll is how often resources that are not ready yet are checked
	// again, until the health timeout.
	healthPoll = 2 * time.Second
)

// ownedConditions are the BundleDeployment conditions the deployer writes;
// any other is written back as read.
var ownedConditions = []string{fleet.ReadyCondition, fleet.DeployedCondition, fleet.MonitoredCondition}

// Reconcile applies one BundleDeployment, or prunes it when it is gone.
//
// How the pass ends (internal/reconciler) decides when it runs again:
// success → ResyncInterval (drift and health check), or sooner while
// resources are not ready within the health timeout (healthPoll); a
// transient error (API errors, kinds the cluster does not serve yet) →
// backoff 1s..5m; *reconciler.Waiting: for content → contentRetry, for a
// missing ServiceAccount or objects it may not apply (only a downstream
// admin can fix those, and nothing tells the agent when they did) →
// ResyncInterval; *reconciler.Stalled (undecodable content or manifests, a
// bundle that cannot be applied as it is, an invalid serviceAccount, labels
// for another cluster) → not retried: only a new spec, new content or new
// labels help, and those wake the reconciler.
func (d *Deployer) Reconcile(ctx context.Context, req reconcile.Request) (ctrl.Result, error) {
	d.reconciles.Add(1)
	bd := &fleet.BundleDeployment{}
	if err := d.up.Get(ctx, req.NamespacedName, bd); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		return d.removeDeleted(ctx, req.Name)
	}
	if !bd.Spec.Paused && !appliedAsSpecified(bd) {
		// The cache may not show this deployer's own status write after
		// its last apply yet: applying the same deployment again would
		// undo what changed on the cluster since (kept when correctDrift
		// is off). A new deployment is rare; it is read from the API
		// server once.
		live := &fleet.BundleDeployment{}
		if err := d.upReader.Get(ctx, req.NamespacedName, live); err == nil {
			bd = live
		}
	}
	patcher, err := reconciler.NewStatusPatcher(d.up, bd, ownedConditions...)
	if err != nil {
		return ctrl.Result{}, err
	}
	before := bd.Status.DeepCopy()
	obs, schedule, err := d.reconcile(ctx, bd)
	bd.Status = computeStatus(bd.Status, obs)
	// A BundleDeployment deleted meanwhile is not written; its deletion
	// brings it back here to be pruned.
	if perr := patcher.WithFieldManager(fieldManager).Patch(ctx, bd); perr != nil {
		if ctx.Err() != nil {
			return ctrl.Result{}, nil // shutting down
		}
		// A conflict (the deployer's own last status write not in its
		// cache yet) is retried at once, not after the backoff of a
		// second.
		return reconciler.StatusPatchFailed(ctx, perr, err)
	}
	if f := obs.Failed; f != nil && !equality.Semantic.DeepEqual(bd.Status.Conditions, before.Conditions) {
		ctrl.LoggerFrom(ctx).Info("bundle not applied", "reason", f.Reason, "message", f.Message)
	}
	return reconciler.Failure(err).Result(schedule)
}

// appliedAsSpecified reports whether bd's status says its deployment and
// forced sync generation are applied.
func appliedAsSpecified(bd *fleet.BundleDeployment) bool {
	return bd.Spec.DeploymentID == bd.Status.AppliedDeploymentID &&
		bd.Status.SyncGeneration != nil && *bd.Status.SyncGeneration == bd.Spec.Options.ForceSyncGeneration
}

// reconcile is the deploy and monitor steps of a BundleDeployment that
// exists, as a straight line. It returns what it saw and did, when to look
// again if the pass succeeded (zero: only when something changes), and how
// the pass ended (see Reconcile).
func (d *Deployer) reconcile(ctx context.Context, bd *fleet.BundleDeployment) (observation, time.Duration, error) {
	opts := bd.Spec.Options
	o := observation{
		Generation:          bd.Generation,
		DeploymentID:        bd.Spec.DeploymentID,
		ForceSyncGeneration: opts.ForceSyncGeneration,
		Paused:              bd.Spec.Paused,
	}
	// stop ends the pass with err. A *reconciler.Waiting or
	// *reconciler.Stalled is reported under its reason: content on its way
	// as waiting for it, anything else as a failed deploy. Another error is
	// reported as a failed deploy under reason, or, with reason "", not at
	// all (an API error before the deploy step got anywhere).
	stop := func(reason string, err error) (observation, time.Duration, error) {
		out := reconciler.Failure(err)
		switch out.Kind() {
		case reconciler.KindStalled:
			o.Failed = &failure{Reason: out.Stalled().Reason, Message: err.Error()}
		case reconciler.KindWaiting:
			if w := out.Waiting(); w.Reason == WaitingForContentReason || w.Reason == WaitingForDependencyReason {
				o.Waiting, o.WaitingReason = w.Message, w.Reason
			} else {
				o.Failed = &failure{Reason: w.Reason, Message: err.Error()}
			}
		default:
			if reason != "" {
				o.Failed = &failure{Reason: reason, Message: err.Error()}
			}
		}
		return o, 0, err
	}

	// Made for this cluster? Otherwise nothing happens: no apply, no prune,
	// no health check.
	if msg := clusterMismatch(bd.Labels, d.opts.ClusterNamespace, d.opts.ClusterName); msg != "" {
		return stop("", reconciler.Stall(fleet.ClusterMismatchReason, "%s", msg))
	}

	// Who applies: the agent, or the ServiceAccount the options name.
	id, err := d.identityFor(ctx, opts.ServiceAccount)
	if err != nil {
		return stop("", err)
	}

	upToDate := appliedAsSpecified(bd)
	if bd.Spec.Paused && !upToDate {
		// Nothing is applied while paused; what the inventory holds is
		// still watched for health.
		prev, err := d.inv.get(ctx, bd.Name)
		if err != nil || prev == nil {
			return o, 0, err
		}
		return d.monitor(ctx, bd, id, o, prev.Resources, nil)
	}

	// Dependencies: a new deployment waits for them (dependencies.go).
	if !upToDate {
		if err := d.checkDependencies(ctx, bd); err != nil {
			return stop("", err)
		}
	}

	// Content.
	if bd.Spec.DeploymentID == "" {
		return stop("", reconciler.Wait(WaitingForContentReason, 0, "the BundleDeployment names no deployment yet"))
	}
	manifests, applyOpts, back, err := d.desired(ctx, bd)
	if err != nil {
		return stop("", err)
	}

	// Objects.
	objs, hookObjs, err := splitContent(manifests)
	if err != nil {
		return stop("", reconciler.Stall(fleet.ApplyFailedReason, "%v", err))
	}
	p, err := prepareObjects(objs, applyOpts, d.local.RESTMapper(), func(objs []*unstructured.Unstructured) {
		d.self.rm.SetOwnerLabels(objs, bd.Name, bd.Namespace)
	})
	if err != nil {
		return stop(fleet.ApplyFailedReason, err)
	}
	refs := p.refs()
	prev, err := d.inv.get(ctx, bd.Name)
	if err != nil {
		return o, 0, err
	}

	// Apply: a new deployment, a forced sync, an inventory that misses
	// objects of the bundle, or drift to correct.
	correct := correctDrift(bd)
	needApply := !bd.Spec.Paused && (!upToDate || !prev.contains(refs))
	var drift []driftEntry
	if !needApply {
		if prev == nil {
			// Paused before anything was applied: nothing to monitor.
			return o, 0, nil
		}
		if drift, err = d.diff(ctx, id, p.objects, opts.Diff); err != nil {
			return d.monitorFailed(o, refs, err)
		}
		if correct != nil && len(drift) > 0 && !bd.Spec.Paused {
			needApply = true
			for _, e := range drift {
				o.Corrected = append(o.Corrected, e.ref.String())
			}
			ctrl.LoggerFrom(ctx).Info("correcting drift", "resources", o.Corrected)
		}
	}
	if needApply {
		// Helm hooks run for a new deployment or a forced sync, not for
		// drift correction (hooks.go).
		var hr *hookRun
		if !upToDate {
			if hr, err = d.newHookRun(bd, id, hookObjs); err != nil {
				return stop(fleet.ApplyFailedReason, err)
			}
			if err := hr.preHooks(ctx, bd, p, prev); err != nil {
				return stop(HookFailedReason, err)
			}
		}
		if err := d.apply(ctx, bd, id, p, prev, correct); err != nil {
			return stop(fleet.ApplyFailedReason, err)
		}
		if hr != nil {
			if err := hr.postHooks(ctx, bd); err != nil {
				return stop(HookFailedReason, err)
			}
		}
		o.Applied = true
		if !upToDate {
			// A new deployment, or a forced sync: the health timeout
			// counts from now (kept in the status, so a restarted agent
			// counts from the same moment).
			o.AppliedAt = ptr.To(metav1.Now())
		}
		if drift, err = d.diff(ctx, id, p.objects, opts.Diff); err != nil {
			return d.monitorFailed(o, refs, err)
		}
	}
	o, next, err := d.monitor(ctx, bd, id, o, refs, drift)
	return d.afterMonitor(ctx, bd, id, manifests, back, o, next, err)
}

// monitor reports drift (already computed) and health of the inventory,
// and says when to look again.
func (d *Deployer) monitor(ctx context.Context, bd *fleet.BundleDeployment, id *identity, o observation, refs []objRef, drift []driftEntry) (observation, time.Duration, error) {
	o.Resources = resources(refs)
	o.Monitored = true
	for _, e := range drift {
		o.Modified = append(o.Modified, e.status())
	}
	nonReady, err := d.health(ctx, id, refs, o.Resources, bd.Spec.Options.IgnoreOptions, waitsForJobs(bd.Spec.Options))
	if err != nil {
		return d.monitorFailed(o, refs, err)
	}
	o.NonReady = nonReady
	if len(nonReady) == 0 {
		return o, d.resync(), nil
	}
	timeout := d.opts.HealthTimeout
	if h := bd.Spec.Options.Helm; h != nil && h.TimeoutSeconds > 0 {
		timeout = time.Duration(h.TimeoutSeconds) * time.Second
	}
	if left := timeout - time.Since(appliedSince(bd, &o)); left > 0 {
		return o, min(healthPoll, left+100*time.Millisecond, d.opts.ResyncInterval), nil
	}
	o.HealthTimedOut = true
	return o, d.resync(), nil
}

// appliedSince is when the deployment in force was applied: by this pass,
// or as the status records it, so an agent that restarts counts the health
// timeout from the same moment. A status that does not record it (written
// by an earlier agent) counts from the Deployed condition's last transition
// when it is True, or from now, and records that.
func appliedSince(bd *fleet.BundleDeployment, o *observation) time.Time {
	switch {
	case o.AppliedAt != nil:
		return o.AppliedAt.Time
	case bd.Status.AppliedAt != nil:
		return bd.Status.AppliedAt.Time
	}
	since := metav1.Now()
	if c := meta.FindStatusCondition(bd.Status.Conditions, fleet.DeployedCondition); c != nil && c.Status == metav1.ConditionTrue {
		since = c.LastTransitionTime
	}
	o.AppliedAt = &since
	return since.Time
}

func (d *Deployer) monitorFailed(o observation, refs []objRef, err error) (observation, time.Duration, error) {
	o.Monitored = true
	o.Resources = resources(refs)
	o.MonitorError = err.Error()
	return o, 0, err
}

// resync is ResyncInterval with up to 10% jitter, so many BundleDeployments
// do not all wake together.
func (d *Deployer) resync() time.Duration {
	i := d.opts.ResyncInterval
	return i + time.Duration(rand.Int64N(int64(i)/10+1))
}

func correctDrift(bd *fleet.BundleDeployment) *fleet.CorrectDrift {
	c := bd.Spec.CorrectDrift
	if c == nil {
		c = bd.Spec.Options.CorrectDrift
	}
	if c == nil || !c.Enabled {
		return nil
	}
	return c
}

func resources(refs []objRef) []fleet.BundleDeploymentResource {
	out := make([]fleet.BundleDeploymentResource, 0, len(refs))
	for _, r := range refs {
		out = append(out, r.resource())
	}
	return out
}

// apply applies a prepared bundle staged (CRDs, namespaces and cluster
// roles first) as id, prunes what left it and stores the new inventory.
// The agent's own bundle, and a bundle applied as a ServiceAccount, are
// dry-run as a whole first: a bundle that would fail half-way (an invalid
// object, an object the ServiceAccount may not write) is not applied at
// all. A refusal (403) to a ServiceAccount is a *reconciler.Waiting
// (Forbidden; see refused).
func (d *Deployer) apply(ctx context.Context, bd *fleet.BundleDeployment, id *identity, p *prepared, prev *inventory, correct *fleet.CorrectDrift) error {
	// A namespace that exists is left alone unless the options label or
	// annotate it: applying it again under the same field manager would
	// take away labels another apply gave it (the controller's label on the
	// agent's namespace).
	if err := d.checkNamespaceLifecycle(ctx, bd, p); err != nil {
		return err
	}
	withNS := p.namespace != nil
	if withNS && !p.namespaceMeta {
		err := d.local.Get(ctx, client.ObjectKey{Name: p.namespace.GetName()}, &corev1.Namespace{})
		switch {
		case err == nil:
			withNS = false
		case !apierrors.IsNotFound(err):
			return fmt.Errorf("reading namespace %s: %w", p.namespace.GetName(), err)
		}
	}
	objs := p.all(withNS)
	switch {
	case id.impersonated():
		if err := d.dryRunAll(ctx, id, objs); err != nil {
			if reconciler.Failure(err).Kind() == reconciler.KindWaiting {
				return err // refused
			}
			return fmt.Errorf("the bundle was not applied, its dry run as %s failed: %w", id.name(d.opts.AgentNamespace), err)
		}
	case isAgentBundle(bd.Labels, d.opts.ClusterNamespace, d.opts.ClusterName):
		if err := d.dryRunAll(ctx, id, objs); err != nil {
			return fmt.Errorf("the agent bundle was not applied, its dry run failed: %w", err)
		}
	}
	opts := ssa.DefaultApplyOptions()
	opts.WaitInterval = 500 * time.Millisecond
	opts.Force = forceApply(bd.Spec.Options, correct)
	refs := p.refs()
	cs, err := id.rm.ApplyAllStaged(ctx, objs, opts)
	if err != nil {
		// Some objects may be applied: remember them with the previous ones,
		// so a later prune finds them.
		if id.impersonated() && apierrors.IsForbidden(err) {
			who := id.name(d.opts.AgentNamespace)
			err = d.refused(who, []string{refusal.Describe(who, "", err)}, "the deployment was applied only in part")
		}
		if perr := d.inv.put(ctx, d.newInventory(bd, id, union(refs, prev))); perr != nil {
			err = errors.Join(err, perr)
		}
		return err
	}
	if changed := changes(cs); len(changed) > 0 {
		ctrl.LoggerFrom(ctx).Info("applied", "changes", changed, "as", id.name(d.opts.AgentNamespace))
	}
	if stale := prunable(ctx, prev.without(refs), bd.Spec.Options.DeleteCRDResources); len(stale) > 0 && !bd.Spec.Options.KeepResources {
		if err := d.prune(ctx, id, stale, bd.Name, bd.Namespace); err != nil {
			if perr := d.inv.put(ctx, d.newInventory(bd, id, union(refs, prev))); perr != nil {
				err = errors.Join(err, perr)
			}
			return err
		}
	}
	return d.inv.put(ctx, d.newInventory(bd, id, refs))
}

func (d *Deployer) newInventory(bd *fleet.BundleDeployment, id *identity, refs []objRef) *inventory {
	return &inventory{
		BundleDeployment:   bd.Name,
		ClusterNamespace:   bd.Namespace,
		KeepResources:      bd.Spec.Options.KeepResources,
		ServiceAccount:     id.serviceAccount,
		Resources:          refs,
		Namespace:          targetNamespace(bd.Spec.Options),
		DeleteNamespace:    bd.Spec.Options.DeleteNamespace,
		DeleteCRDResources: bd.Spec.Options.DeleteCRDResources,
	}
}

func changes(cs *ssa.ChangeSet) []string {
	var out []string
	for _, e := range cs.Entries {
		if e.Action != ssa.UnchangedAction && e.Action != ssa.SkippedAction {
			out = append(out, e.String())
		}
	}
	return out
}

// dryRunAll server-side dry-runs every object as id. An object in a
// namespace the set creates is dry-run in the agent's namespace instead,
// as the agent (validation depends neither on the namespace nor on who
// asks; the first attempt was authorized before the namespace was found
// missing); custom resources whose CRD the set brings cannot be dry-run
// before it is applied and are let through. Refusals to a ServiceAccount
// are collected into one refusal (see refused).
func (d *Deployer) dryRunAll(ctx context.Context, id *identity, objs []*unstructured.Unstructured) error {
	newNS := map[string]bool{}
	for _, o := range objs {
		if o.GetKind() == "Namespace" && o.GroupVersionKind().Group == "" {
			newNS[o.GetName()] = true
		}
	}
	who := id.name(d.opts.AgentNamespace)
	var errs []error
	var refused []string
	for _, o := range objs {
		_, _, _, err := id.rm.Diff(ctx, o.DeepCopy(), ssa.DefaultDiffOptions())
		if err != nil && apierrors.IsNotFound(err) && newNS[o.GetNamespace()] {
			moved := o.DeepCopy()
			moved.SetNamespace(d.opts.AgentNamespace)
			_, _, _, err = d.self.rm.Diff(ctx, moved, ssa.DefaultDiffOptions())
		}
		switch {
		case err == nil || meta.IsNoMatchError(err):
		case id.impersonated() && apierrors.IsForbidden(err):
			refused = append(refused, refusal.Describe(who, refOf(o).String(), err))
		default:
			errs = append(errs, err)
		}
	}
	if len(refused) > 0 {
		errs = append([]error{d.refused(who, refused, "nothing of this deployment was applied")}, errs...)
	}
	return errors.Join(errs...)
}

// prune deletes, as id, objects that carry the BundleDeployment's owner
// labels, and not the prune-disabled annotation. Kinds no longer served
// count as gone.
func (d *Deployer) prune(ctx context.Context, id *identity, refs []objRef, name, namespace string) error {
	objs := make([]*unstructured.Unstructured, 0, len(refs))
	for _, r := range refs {
		objs = append(objs, r.object())
	}
	// Dependents first, CRDs and namespaces last.
	sort.Sort(sort.Reverse(ssa.SortableUnstructureds(objs)))
	opts := ssa.DefaultDeleteOptions()
	opts.Inclusions = id.rm.GetOwnerLabels(name, namespace)
	opts.Exclusions = map[string]string{PruneAnnotation: PruneDisabled}
	who := id.name(d.opts.AgentNamespace)
	var errs []error
	var refused, deleted []string
	for _, o := range objs {
		cse, err := id.rm.Delete(ctx, o, opts)
		switch {
		case err == nil:
			if cse.Action == ssa.DeletedAction {
				deleted = append(deleted, cse.Subject)
			}
		case meta.IsNoMatchError(err):
		case id.impersonated() && apierrors.IsForbidden(err):
			refused = append(refused, refusal.Describe(who, refOf(o).String(), err))
		default:
			errs = append(errs, err)
		}
	}
	if len(deleted) > 0 {
		ctrl.LoggerFrom(ctx).Info("pruned", "resources", deleted, "as", who)
	}
	if len(refused) > 0 {
		errs = append([]error{d.refused(who, refused, "objects that left the bundle were not pruned")}, errs...)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("pruning: %w", err)
	}
	return nil
}

// removeDeleted prunes what a deleted BundleDeployment applied, unless it
// asked to keep its resources, and forgets its inventory.
func (d *Deployer) removeDeleted(ctx context.Context, name string) (ctrl.Result, error) {
	inv, err := d.inv.get(ctx, name)
	if err != nil || inv == nil {
		return ctrl.Result{}, err
	}
	// The cache says it is gone; make sure before deleting anything.
	err = d.upReader.Get(ctx, client.ObjectKey{Namespace: d.opts.Namespace, Name: name}, &fleet.BundleDeployment{})
	switch {
	case err == nil:
		return ctrl.Result{RequeueAfter: time.Second}, nil
	case !apierrors.IsNotFound(err):
		return ctrl.Result{}, err
	}
	log := ctrl.LoggerFrom(ctx)
	if inv.KeepResources {
		log.Info("bundledeployment deleted, keeping its resources", "resources", len(inv.Resources))
	} else {
		// As the identity that applied them: a missing ServiceAccount
		// keeps them (and the inventory) until it is back.
		id, err := d.identityFor(ctx, inv.ServiceAccount)
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("pruning the resources of deleted bundledeployment %s: %w", name, err)
		}
		log.Info("bundledeployment deleted, pruning its resources", "resources", len(inv.Resources), "as", id.name(d.opts.AgentNamespace))
		d.runDeleteHooks(ctx, name, id, bundlecontent.PhasePreDelete)
		if err := d.prune(ctx, id, prunable(ctx, inv.Resources, inv.DeleteCRDResources), inv.BundleDeployment, inv.ClusterNamespace); err != nil {
			return ctrl.Result{}, err
		}
		d.runDeleteHooks(ctx, name, id, bundlecontent.PhasePostDelete)
		if err := d.deleteNamespace(ctx, id, inv); err != nil {
			return ctrl.Result{}, err
		}
	}
	if err := d.removeHistory(ctx, name); err != nil {
		return ctrl.Result{}, err
	}
	if err := d.forgetDeleteHooks(ctx, name); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, d.inv.remove(ctx, name)
}

// driftEntry is one object that differs from the bundle.
type driftEntry struct {
	ref     objRef
	missing bool
	summary string
}

func (e driftEntry) status() fleet.ModifiedStatus {
	return fleet.ModifiedStatus{
		Kind: e.ref.Kind, APIVersion: e.ref.APIVersion, Namespace: e.ref.Namespace, Name: e.ref.Name,
		Create: e.missing, Patch: e.summary,
	}
}

// diff dry-runs every object and reports those that are missing or differ
// from what applying them would make, leaving out what
// diff.comparePatches name (drift.go, internal/comparepatch).
func (d *Deployer) diff(ctx context.Context, id *identity, objs []*unstructured.Unstructured, opts *fleet.DiffOptions) ([]driftEntry, error) {
	ignored, err := comparepatch.New(opts)
	if err != nil {
		// Only a new spec helps (it wakes the reconciler).
		return nil, reconciler.Stall(MonitorFailedReason, "%v", err)
	}
	var out []driftEntry
	var errs []error
	for _, o := range objs {
		ref := refOf(o)
		cse, live, merged, err := id.rm.Diff(ctx, o.DeepCopy(), ssa.DefaultDiffOptions())
		switch {
		case err != nil && (apierrors.IsNotFound(err) || meta.IsNoMatchError(err)):
			// Its namespace or its CRD is gone: so is the object.
			if !ignored.IgnoresMissing(o) {
				out = append(out, driftEntry{ref: ref, missing: true})
			}
		case err != nil:
			errs = append(errs, fmt.Errorf("checking %s for drift: %w", ref, err))
		case cse.Action == ssa.CreatedAction:
			if !ignored.IgnoresMissing(o) {
				out = append(out, driftEntry{ref: ref, missing: true})
			}
		case cse.Action == ssa.ConfiguredAction:
			e := driftEntry{ref: ref}
			if live != nil && merged != nil {
				var drifted bool
				if e.summary, drifted, err = drifts(ignored, live, merged); err != nil {
					errs = append(errs, fmt.Errorf("checking %s for drift: %w", ref, err))
					continue
				}
				if !drifted {
					continue
				}
			}
			out = append(out, e)
		}
	}
	return out, errors.Join(errs...)
}

// health computes the kstatus of every object, one GET each as id, and
// records each one's creation time in res (res[i] is refs[i]). Conditions
// that ignore.conditions name do not count (readiness.go); with
// waitForJobs, a Job is ready only once complete (jobs.go).
func (d *Deployer) health(ctx context.Context, id *identity, refs []objRef, res []fleet.BundleDeploymentResource, ignore *fleet.IgnoreOptions, waitForJobs bool) ([]fleet.NonReadyStatus, error) {
	var out []fleet.NonReadyStatus
	for i, r := range refs {
		nr := fleet.NonReadyStatus{Kind: r.Kind, APIVersion: r.APIVersion, Namespace: r.Namespace, Name: r.Name}
		u := r.object()
		err := id.c.Get(ctx, client.ObjectKeyFromObject(u), u)
		switch {
		case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
			nr.Summary = fleet.SummaryOf(string(status.NotFoundStatus), "")
			out = append(out, nr)
			continue
		case err != nil:
			return out, fmt.Errorf("checking the health of %s: %w", r, err)
		}
		recordCreated(res, i, u)
		nr.UID = u.GetUID()
		result, err := status.Compute(withoutIgnoredConditions(u, ignore))
		if err != nil {
			nr.Summary = fleet.SummaryOf(string(status.UnknownStatus), err.Error())
			out = append(out, nr)
			continue
		}
		if result.Status == status.CurrentStatus && !(waitForJobs && jobIncomplete(u)) {
			continue
		}
		if result.Status == status.CurrentStatus {
			result.Status, result.Message = status.InProgressStatus, "waitForJobs: "+result.Message
		}
		nr.Summary = fleet.SummaryOf(string(result.Status), result.Message)
		out = append(out, nr)
	}
	return out, nil
}
