package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller/configstore"
	"github.com/gitops-fleet/fleet/controller/metrics"
	"github.com/gitops-fleet/fleet/controller/sharding"
	"github.com/gitops-fleet/fleet/controller/summary"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/reconciler"
	"github.com/gitops-fleet/fleet/renderer"
)

// KeepRevisions is how many finished AgentRollouts are kept besides the
// current one (and the previous revision it may roll back to).
const KeepRevisions = 5

// Reconciler keeps the AgentRollout of the current revision: it makes it
// (with the plan) when the revision changes, supersedes older unfinished
// ones, moves it from wave to wave and removes old finished ones. One key
// reconciles it all: the rollout is fleet-wide.
type Reconciler struct {
	// Shard: the rollout is fleet-wide, one shard (the owner of key
	// "agentrollout") keeps it.
	Shard    sharding.Shard
	Client   client.Client
	Config   *configstore.Store
	Renderer *renderer.AgentRenderer
	Recorder recorder.EventRecorder
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// agentState is one Cluster's agent Bundle and its deployment.
type agentState struct {
	bundle *fleet.Bundle
	bd     *fleet.BundleDeployment
}

// Reconcile brings the current revision's AgentRollout one step on and
// sets its conditions. A rollout that cannot go on until a person acts
// (halted, aborted, unplannable, edited to another revision) is Stalled and
// not retried: its own change, or a watched one, brings it back.
func (r *Reconciler) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	if !r.Shard.OwnsKey("agentrollout") {
		return ctrl.Result{}, nil
	}
	cfg := r.Config.Get()
	if !cfg.GetManageAgent() {
		return ctrl.Result{}, nil
	}
	revision, err := Revision(r.Renderer, cfg)
	if err != nil {
		// The Cluster reconciler reports a configuration that renders no
		// agent on every Cluster.
		return ctrl.Result{}, nil
	}
	now := reconciler.Clock(r.Now).Now()

	rollouts := &fleet.AgentRolloutList{}
	if err := r.Client.List(ctx, rollouts); err != nil {
		return ctrl.Result{}, err
	}
	agents, clusters, err := r.agents(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	var ro *fleet.AgentRollout
	for i := range rollouts.Items {
		if rollouts.Items[i].Name == Name(revision) {
			ro = &rollouts.Items[i]
		}
	}
	if ro == nil {
		if ro, err = r.create(ctx, revision, cfg, agents); err != nil {
			return reconciler.Failure(err).Result(0)
		}
	}
	if err := r.supersede(ctx, rollouts.Items, ro, now); err != nil {
		return ctrl.Result{}, err
	}
	// The patcher is made from the status as read, before restart clears it.
	patcher, err := reconciler.NewStatusPatcher(r.Client, ro, statusRules.Owned()...)
	if err != nil {
		return ctrl.Result{}, err
	}
	stalledBefore := stalledReason(ro)
	out, events := r.step(ctx, ro, cfg, agents, clusters, revision, now)
	statusRules.Set(ro, out, now)
	if err := patcher.Patch(ctx, ro, reconciler.WithOptimisticLock); err != nil {
		return ctrl.Result{}, errors.Join(out.Err, err)
	}
	for _, e := range events {
		reconciler.Eventf(r.Recorder, ro, nil, e.Type, e.Reason, "Rollout", "%s", e.Message)
		ctrl.LoggerFrom(ctx).Info(e.Message, "rollout", ro.Name, "reason", e.Reason)
	}
	if s := newlyStalled(stalledBefore, out); s != nil && len(events) == 0 {
		// Progress's own events say why it halted or was aborted; a
		// rollout stalled before Progress says so here, once.
		reconciler.Eventf(r.Recorder, ro, nil, corev1.EventTypeWarning, s.Reason, "Rollout", "%s", s.Message)
		ctrl.LoggerFrom(ctx).Info(s.Message, "rollout", ro.Name, "reason", s.Reason)
	}
	if out.Kind() == reconciler.KindTransient {
		return out.Result(0)
	}
	report(ro)
	if err := r.prune(ctx, rollouts.Items, ro); err != nil {
		return ctrl.Result{}, err
	}
	return out.Result(0)
}

// step is one pass over the current revision's rollout: its status moved on
// and what that comes to (Outcome), and the events to record.
func (r *Reconciler) step(ctx context.Context, ro *fleet.AgentRollout, cfg *config.Config, agents map[string]*agentState, clusters map[string]*fleet.Cluster, revision string, now time.Time) (reconciler.Outcome, []Event) {
	if ro.Spec.Revision != revision {
		return reconciler.Failure(reconciler.Stall(RevisionMismatchReason,
			"AgentRollout %s is named after revision %s but spec.revision says %s (edited by hand?): delete it, and the controller makes it again", ro.Name, short(revision), short(ro.Spec.Revision))), nil
	}
	if err := r.restart(ctx, ro, cfg, agents, revision); err != nil {
		return reconciler.Failure(err), nil
	}
	if ro.Status.Phase == "" && len(ro.Status.Waves) == 0 {
		// A new rollout, or one whose plan was never written: plan now.
		waves, err := Plan(candidates(agents, clusters, revision), ro.Spec.Strategy)
		if err != nil {
			return reconciler.Failure(reconciler.Stall(InvalidStrategyReason,
				"cannot plan AgentRollout %s: spec.strategy: %v; fix spec.strategy, or delete the AgentRollout and the controller makes it again from the configuration's agentRollout", ro.Name, err)), nil
		}
		ro.Status.Waves = waves
	}
	joinLate(ro, agents, revision)
	canRollBack, err := r.hasRecord(ctx, ro.Spec.PreviousRevision)
	if err != nil {
		return reconciler.Failure(err), nil
	}
	obs := observe(ro, agents, clusters, revision, now, cfg.OfflineAfter())
	st, events, after := Progress(ro, Inputs{Observed: obs, CanRollBack: canRollBack, Now: now})
	st.Current = true
	st.Conditions = ro.Status.Conditions
	ro.Status = st
	return Outcome(ro, after), events
}

// agents reads every agent Bundle, its BundleDeployment and every Cluster,
// keyed "namespace/name" of the Cluster. They are read only, so the cache
// lends them without a deep copy: a pass looks at every Cluster, and an
// agent Bundle carries the agent's manifests.
func (r *Reconciler) agents(ctx context.Context) (map[string]*agentState, map[string]*fleet.Cluster, error) {
	bundles := &fleet.BundleList{}
	if err := r.Client.List(ctx, bundles, client.MatchingLabels{fleet.AgentBundleLabel: "true"}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, nil, err
	}
	bds := &fleet.BundleDeploymentList{}
	if err := r.Client.List(ctx, bds, client.MatchingLabels{fleet.AgentBundleLabel: "true"}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, nil, err
	}
	list := &fleet.ClusterList{}
	if err := r.Client.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		return nil, nil, err
	}
	clusters := make(map[string]*fleet.Cluster, len(list.Items))
	for i := range list.Items {
		c := &list.Items[i]
		clusters[c.Namespace+"/"+c.Name] = c
	}
	agents := map[string]*agentState{}
	for i := range bundles.Items {
		b := &bundles.Items[i]
		name := b.Labels[fleet.ClusterLabel]
		if name == "" {
			continue
		}
		agents[b.Namespace+"/"+name] = &agentState{bundle: b}
	}
	for i := range bds.Items {
		bd := &bds.Items[i]
		key := bd.Labels[fleet.BundleNamespaceLabel] + "/" + bd.Labels[fleet.ClusterLabel]
		if a := agents[key]; a != nil && bd.Labels[fleet.BundleLabel] == a.bundle.Name {
			a.bd = bd
		}
	}
	return agents, clusters, nil
}

// create makes the AgentRollout of a new revision: its chart and
// configuration, the strategy in force, and the revision most agents are
// on now as the one to go back to.
func (r *Reconciler) create(ctx context.Context, revision string, cfg *config.Config, agents map[string]*agentState) (*fleet.AgentRollout, error) {
	chart, err := r.Renderer.ChartArchive()
	if err != nil {
		return nil, err
	}
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	ro := &fleet.AgentRollout{
		ObjectMeta: metav1.ObjectMeta{Name: Name(revision), Labels: map[string]string{fleet.ManagedLabel: "true"}},
		Spec: fleet.AgentRolloutSpec{
			Revision:         revision,
			PreviousRevision: previousRevision(agents, revision),
			Chart:            chart,
			Config:           string(cfgJSON),
			Strategy:         cfg.AgentRollout.DeepCopy(),
		},
	}
	if err := r.Client.Create(ctx, ro, client.FieldOwner(reconciler.FieldManager)); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil, reconciler.Wait(fleet.WaitingReason, 0, "AgentRollout %s was made meanwhile", ro.Name)
		}
		return nil, fmt.Errorf("creating AgentRollout %s: %w", ro.Name, err)
	}
	return ro, nil
}

// restart plans again a rollout that finished (or was superseded, or
// aborted and then superseded) when agents are off its revision once more:
// the configuration went back to it.
func (r *Reconciler) restart(ctx context.Context, ro *fleet.AgentRollout, cfg *config.Config, agents map[string]*agentState, revision string) error {
	if ro.Status.Phase != fleet.RolloutComplete && ro.Status.Phase != fleet.RolloutSuperseded {
		return nil
	}
	stale := false
	for _, a := range agents {
		if a.bundle.Annotations[RevisionAnnotation] != revision {
			stale = true
			break
		}
	}
	if !stale {
		return nil
	}
	before := ro.DeepCopy()
	ro.Spec.PreviousRevision = previousRevision(agents, revision)
	ro.Spec.Strategy = cfg.AgentRollout.DeepCopy()
	ro.Spec.Paused, ro.Spec.Aborted = false, false
	if err := r.Client.Patch(ctx, ro, client.MergeFrom(before), client.FieldOwner(reconciler.FieldManager)); err != nil {
		return fmt.Errorf("restarting AgentRollout %s: %w", ro.Name, err)
	}
	ro.Status = fleet.AgentRolloutStatus{ResumedGeneration: ro.Spec.ResumeGeneration, Current: true}
	return nil
}

// previousRevision is the revision most agent Bundles are on, other than
// the new one.
func previousRevision(agents map[string]*agentState, revision string) string {
	counts := map[string]int{}
	for _, a := range agents {
		if rev := a.bundle.Annotations[RevisionAnnotation]; rev != "" && rev != revision {
			counts[rev]++
		}
	}
	best := ""
	for rev, n := range counts {
		if n > counts[best] || (n == counts[best] && rev < best) {
			best = rev
		}
	}
	return best
}

// candidates are the Clusters with an agent Bundle.
func candidates(agents map[string]*agentState, clusters map[string]*fleet.Cluster, revision string) []Candidate {
	out := make([]Candidate, 0, len(agents))
	for key, a := range agents {
		c := clusters[key]
		if c == nil || !c.DeletionTimestamp.IsZero() {
			continue
		}
		out = append(out, Candidate{Key: key, Labels: c.Labels, Current: a.bundle.Annotations[RevisionAnnotation] == revision})
	}
	return out
}

// joinLate adds to the last wave the Clusters whose agent Bundle is not on
// the revision and that the plan does not name (made since, or given an
// agent Bundle since).
func joinLate(ro *fleet.AgentRollout, agents map[string]*agentState, revision string) {
	switch ro.Status.Phase {
	case fleet.RolloutComplete, fleet.RolloutSuperseded, fleet.RolloutAborted:
		return
	}
	planned := map[string]bool{}
	for _, w := range ro.Status.Waves {
		for _, k := range w.Clusters {
			planned[k] = true
		}
	}
	var late []string
	for key, a := range agents {
		if !planned[key] && a.bundle.Annotations[RevisionAnnotation] != revision {
			late = append(late, key)
		}
	}
	if len(late) == 0 {
		return
	}
	sort.Strings(late)
	if n := len(ro.Status.Waves); n == 0 || ro.Status.Waves[n-1].Canary {
		// Late Clusters are no canaries.
		ro.Status.Waves = append(ro.Status.Waves, fleet.AgentRolloutWave{})
	}
	last := &ro.Status.Waves[len(ro.Status.Waves)-1]
	last.Clusters = append(last.Clusters, late...)
}

// observe says, for each planned Cluster, whether its agent is updated.
func observe(ro *fleet.AgentRollout, agents map[string]*agentState, clusters map[string]*fleet.Cluster, revision string, now time.Time, offlineAfter time.Duration) map[string]Observed {
	obs := map[string]Observed{}
	for _, w := range ro.Status.Waves {
		for _, key := range w.Clusters {
			c := clusters[key]
			if c == nil || !c.DeletionTimestamp.IsZero() {
				obs[key] = Observed{Gone: true}
				continue
			}
			obs[key] = Observed{Updated: updated(agents[key], c, revision, now, offlineAfter)}
		}
	}
	return obs
}

// updated: the agent Bundle is on the revision, the Bundle controller has
// written its BundleDeployment for it, the agent applied that and reports
// it Ready (its new pod runs), and the agent still checks in. The
// Cluster's other Bundles do not count: an application that is not Ready
// holds no agent rollout back.
func updated(a *agentState, c *fleet.Cluster, revision string, now time.Time, offlineAfter time.Duration) bool {
	if a == nil || a.bd == nil {
		return false
	}
	b, bd := a.bundle, a.bd
	online := !c.Status.Agent.LastSeen.IsZero() && (offlineAfter <= 0 || now.Sub(c.Status.Agent.LastSeen.Time) <= offlineAfter)
	return b.Annotations[RevisionAnnotation] == revision &&
		b.Status.ObservedGeneration == b.Generation &&
		bd.Spec.DeploymentID != "" && summary.State(bd) == fleet.Ready && online
}

// hasRecord reports whether the AgentRollout of a revision keeps what its
// agents were rendered from.
func (r *Reconciler) hasRecord(ctx context.Context, revision string) (bool, error) {
	if revision == "" {
		return false, nil
	}
	ro := &fleet.AgentRollout{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: Name(revision)}, ro); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	return len(ro.Spec.Chart) > 0 && ro.Spec.Config != "", nil
}

// supersede ends the unfinished rollouts of other revisions (an aborted
// one too: should its revision come back, it is planned anew) and takes
// the current mark off them.
func (r *Reconciler) supersede(ctx context.Context, all []fleet.AgentRollout, current *fleet.AgentRollout, now time.Time) error {
	var errs []error
	for i := range all {
		old := &all[i]
		if old.Name == current.Name {
			continue
		}
		finished := old.Status.Phase == fleet.RolloutComplete || old.Status.Phase == fleet.RolloutSuperseded
		patcher, err := reconciler.NewStatusPatcher(r.Client, old, statusRules.Owned()...)
		if err != nil {
			return err
		}
		old.Status.Current = false
		if !finished {
			old.Status.Phase = fleet.RolloutSuperseded
			old.Status.Message = fmt.Sprintf("replaced by revision %s (AgentRollout %s) before it completed", short(current.Spec.Revision), current.Name)
		}
		// Conditions too for rollouts made before AgentRollouts had them
		// (the patch is skipped when nothing changes).
		statusRules.Set(old, Outcome(old, 0), now)
		if err := patcher.Patch(ctx, old); err != nil {
			errs = append(errs, err)
			continue
		}
		if !finished {
			reconciler.Eventf(r.Recorder, old, nil, corev1.EventTypeNormal, "RolloutSuperseded", "Rollout", "%s", old.Status.Message)
		}
	}
	return errors.Join(errs...)
}

// prune removes finished AgentRollouts beyond the newest KeepRevisions,
// never the current one nor the revision it may go back to.
func (r *Reconciler) prune(ctx context.Context, all []fleet.AgentRollout, current *fleet.AgentRollout) error {
	var old []*fleet.AgentRollout
	for i := range all {
		ro := &all[i]
		if ro.Name == current.Name || ro.Spec.Revision == current.Spec.PreviousRevision {
			continue
		}
		old = append(old, ro)
	}
	if len(old) <= KeepRevisions {
		return nil
	}
	sort.Slice(old, func(i, j int) bool { return old[i].CreationTimestamp.After(old[j].CreationTimestamp.Time) })
	var errs []error
	for _, ro := range old[KeepRevisions:] {
		if err := r.Client.Delete(ctx, ro); client.IgnoreNotFound(err) != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// report sets the rollout metrics from the current rollout.
func report(ro *fleet.AgentRollout) {
	st := ro.Status
	metrics.AgentRolloutClusters.WithLabelValues("updated").Set(float64(st.Updated))
	metrics.AgentRolloutClusters.WithLabelValues("pending").Set(float64(st.Pending))
	metrics.AgentRolloutClusters.WithLabelValues("failed").Set(float64(st.Failed))
	metrics.AgentRolloutWave.Set(float64(st.Wave))
	metrics.AgentRolloutWaves.Set(float64(len(st.Waves)))
	halted := 0.0
	if st.Phase == fleet.RolloutHalted {
		halted = 1
	}
	metrics.AgentRolloutHalted.Set(halted)
}
