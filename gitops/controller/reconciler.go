// Package controller is the GitRepo reconciler of the source component
// (`fleet gitops`): for each GitRepo it checks the GitRepoRestrictions of its
// namespace, asks the repository for its commit (an ls-remote shared through
// gitops/gitsource), reads a new commit's paths into Bundles
// (gitops/bundlereader, charts through gitops/charts), decrypts SOPS-encrypted
// Secrets (gitops/decrypt), writes only the Bundles whose input changed
// (server-side apply, field manager fleet-gitops), prunes the Bundles a
// commit no longer makes only after a complete scan, and folds its Bundles'
// status into the GitRepo's (gitops/status).
//
// A pass touches git only when the GitRepo is due: its polling interval
// passed, its generation or effective options changed, or Trigger asked
// (a webhook, forceSyncGeneration). Passes brought by its Bundles,
// BundleDeployments or restrictions compute the status only.
package controller

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/fluxcd/pkg/ssa"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller/configstore"
	"github.com/gitops-fleet/fleet/gitops/charts"
	"github.com/gitops-fleet/fleet/gitops/gitsource"
	"github.com/gitops-fleet/fleet/gitops/restriction"
	"github.com/gitops-fleet/fleet/gitops/status"
	"github.com/gitops-fleet/fleet/internal/apply"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/reconciler"
)

// FieldManager owns everything the source component writes: Bundles,
// staged Secrets and GitRepo status.
const FieldManager = "fleet-gitops"

// InputHashAnnotation on a Bundle is the hash of what the source component
// last wrote into it (labels but the commit label, annotations, spec): a
// Bundle whose new input hashes the same is not written again, so its
// fleet.cattle.io/commit label is the commit where it last changed.
const InputHashAnnotation = "gitops.fleet.cattle.io/input-hash"

// Defaults.
const (
	DefaultPollingInterval = 15 * time.Second
	DefaultConcurrency     = 4
	DefaultPruneInterval   = 10 * time.Minute
)

// Reasons of a GitRepo's Ready and Stalled conditions the reconciler sets
// besides gitsource's (InvalidSource, AuthFailed, ...) and the restrictions'.
const (
	// FleetYAMLInvalidReason: a path could not be read (its fleet.yaml,
	// values files, charts, encrypted Secrets); the message names each path,
	// file and field. The other paths' Bundles are written.
	FleetYAMLInvalidReason = "FleetYAMLInvalid"
	// BundleNameTakenReason: a Bundle of a path's name belongs to someone
	// else (another GitRepo, an agent, a person) and was not overwritten.
	BundleNameTakenReason = "BundleNameTaken"
	// SecretInvalidReason: a Secret the GitRepo names (clientSecretName,
	// helmSecretName, helmSecretNameForPaths, decryption) is missing or
	// cannot be used.
	SecretInvalidReason = "SecretInvalid"
	// UnsupportedOptionReason: the GitRepo sets an option not supported.
	UnsupportedOptionReason = "UnsupportedOption"
)

// Options configure the Reconciler.
type Options struct {
	// Cache is the git cache (required). It should allow
	// insecureSkipTLSVerify: whether a GitRepo may set it is decided per
	// pass from the configuration (restriction.Evaluate), which changes
	// without a restart.
	Cache *gitsource.Cache
	// Charts fetches charts from repositories; nil: a fetcher with the
	// defaults.
	Charts *charts.Fetcher
	// Config is the controller configuration (the fleet-controller
	// ConfigMap) kept current; nil: the defaults.
	Config *configstore.Store
	// Concurrency is the number of GitRepos reconciled at once (default 4).
	Concurrency int
	// PruneInterval is how often cache entries no GitRepo uses are removed
	// (default 10 minutes).
	PruneInterval time.Duration
	// Clock is the time; nil: time.Now.
	Clock reconciler.Clock
}

// Reconciler reconciles GitRepos.
type Reconciler struct {
	client    client.Client
	apiReader client.Reader
	opts      Options
	ssa       *ssa.ResourceManager

	mu     sync.Mutex
	queue  workqueue.TypedRateLimitingInterface[reconcile.Request]
	forced map[types.NamespacedName]string
	memo   map[types.NamespacedName]*memo
}

// memo is what the reconciler remembers of a GitRepo's last sync, so that
// passes that are not due read nothing from git.
type memo struct {
	// polled is when the repository was last asked (zero: never).
	polled time.Time
	// gen and inputs: the generation and the hash of the inputs (commit,
	// effective options, Secrets' versions) of the last sync.
	gen    int64
	inputs string
	// err is the last sync's outcome, reported again by passes that are
	// not due (nil: the Bundles are the commit's).
	err error
	// complete: the last read gave every path and every write succeeded.
	complete bool
	// staged are the Secrets the last sync staged (pruned by the next
	// complete sync that no longer stages them).
	staged map[string]bool
	// dirty: something the hash does not see changed (a Bundle deleted by
	// hand, a restriction): read and write again at the next pass.
	dirty bool
}

// New returns a Reconciler that reads and writes through c (the manager's
// cached client) and reads Secrets through apiReader (never cached).
func New(c client.Client, apiReader client.Reader, opts Options) *Reconciler {
	if opts.Concurrency <= 0 {
		opts.Concurrency = DefaultConcurrency
	}
	if opts.PruneInterval <= 0 {
		opts.PruneInterval = DefaultPruneInterval
	}
	if opts.Charts == nil {
		opts.Charts = charts.NewFetcher(charts.Options{})
	}
	return &Reconciler{
		client:    c,
		apiReader: apiReader,
		opts:      opts,
		ssa:       apply.NewManager(c, apply.WithFieldManager(FieldManager)),
		forced:    map[types.NamespacedName]string{},
		memo:      map[types.NamespacedName]*memo{},
	}
}

// Trigger asks for an immediate sync of the GitRepo key with a fresh
// ls-remote (a webhook came, or a person asked). It never blocks: the
// request is queued, and several triggers before the pass make one.
// reason is logged. Safe for concurrent use.
func (r *Reconciler) Trigger(key types.NamespacedName, reason string) {
	r.mu.Lock()
	r.forced[key] = reason
	q := r.queue
	r.mu.Unlock()
	if q != nil {
		q.Add(reconcile.Request{NamespacedName: key})
	}
}

// setQueue is the controller's queue, once it started: triggers that came
// before are queued now.
func (r *Reconciler) setQueue(q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.queue = q
	for key := range r.forced {
		q.Add(reconcile.Request{NamespacedName: key})
	}
}

// takeForced returns and clears the trigger of key.
func (r *Reconciler) takeForced(key types.NamespacedName) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	reason, ok := r.forced[key]
	delete(r.forced, key)
	return reason, ok
}

// markDirty makes the next pass of key read and write again.
func (r *Reconciler) markDirty(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if m := r.memo[key]; m != nil {
		m.dirty = true
	}
}

func (r *Reconciler) getMemo(key types.NamespacedName) memo {
	r.mu.Lock()
	defer r.mu.Unlock()
	if m := r.memo[key]; m != nil {
		return *m
	}
	return memo{}
}

func (r *Reconciler) setMemo(key types.NamespacedName, m *memo) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if m == nil {
		delete(r.memo, key)
		return
	}
	r.memo[key] = m
}

func (r *Reconciler) config() *config.Config {
	if r.opts.Config == nil {
		return &config.Config{}
	}
	return r.opts.Config.Get()
}

// pollingInterval is the GitRepo's, zero when polling is off.
func pollingInterval(repo *fleet.GitRepo) time.Duration {
	if repo.Spec.DisablePolling {
		return 0
	}
	if p := repo.Spec.PollingInterval; p != nil && p.Duration > 0 {
		return p.Duration
	}
	return DefaultPollingInterval
}

// Reconcile is one pass over a GitRepo.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	now := r.opts.Clock.Now()
	repo := &fleet.GitRepo{}
	if err := r.client.Get(ctx, req.NamespacedName, repo); err != nil {
		if apierrors.IsNotFound(err) {
			// Its Bundles and staged Secrets are its own: garbage collected.
			r.setMemo(req.NamespacedName, nil)
			r.takeForced(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	patcher, err := reconciler.NewStatusPatcher(r.client, repo, status.Owned()...)
	if err != nil {
		return ctrl.Result{}, err
	}
	patcher = patcher.WithFieldManager(FieldManager)

	p := &pass{r: r, repo: repo, now: now, key: req.NamespacedName}
	if reason, ok := r.takeForced(req.NamespacedName); ok {
		p.forced = true
		log.V(1).Info("sync triggered", "reason", reason)
	}
	syncErr := p.run(ctx)
	if syncErr != nil && !isStalled(syncErr) && !isWaiting(syncErr) {
		log.Error(syncErr, "reading the repository failed")
	}

	obs := status.Observed{Refusal: p.refusal, Sync: syncErr}
	if p.refusal == nil {
		if obs.Bundles, obs.BundleDeployments, err = r.observed(ctx, repo); err != nil {
			return ctrl.Result{}, err
		}
	}
	repo.Status = status.Compute(repo, obs, now)
	if err := patcher.Patch(ctx, repo); err != nil {
		// A conflict (the cache did not show our last status write yet)
		// computes the status again in a moment; the sync itself is
		// remembered.
		return reconciler.StatusPatchFailed(ctx, err, nil)
	}
	out := reconciler.Failure(syncErr)
	if syncErr == nil {
		out = reconciler.Success(fleet.SucceededReason, "")
	}
	return out.Result(p.next)
}

// observed lists the GitRepo's Bundles and their BundleDeployments (from
// the cache).
func (r *Reconciler) observed(ctx context.Context, repo *fleet.GitRepo) ([]fleet.Bundle, []fleet.BundleDeployment, error) {
	bundles := &fleet.BundleList{}
	if err := r.client.List(ctx, bundles, client.InNamespace(repo.Namespace), client.MatchingLabels{fleet.RepoLabel: repo.Name}); err != nil {
		return nil, nil, err
	}
	bds := &fleet.BundleDeploymentList{}
	if err := r.client.List(ctx, bds, client.MatchingLabels{fleet.RepoLabel: repo.Name, fleet.BundleNamespaceLabel: repo.Namespace}); err != nil {
		return nil, nil, err
	}
	return bundles.Items, bds.Items, nil
}

// pass is one reconcile of one GitRepo.
type pass struct {
	r      *Reconciler
	repo   *fleet.GitRepo
	key    types.NamespacedName
	now    time.Time
	forced bool

	refusal *restriction.Refusal
	eff     restriction.Effective
	// next is when to look again (zero: a watch or a trigger brings it).
	next time.Duration
}

func isStalled(err error) bool {
	var s *reconciler.Stalled
	return errors.As(err, &s)
}

func isWaiting(err error) bool {
	var w *reconciler.Waiting
	return errors.As(err, &w)
}

// gitError turns an error of gitsource into the pass's: what the user must
// fix stalls (retried at the next poll), the rest is retried with backoff.
func gitError(err error) error {
	var ge *gitsource.Error
	if !errors.As(err, &ge) {
		return err
	}
	switch ge.Reason {
	case gitsource.ReasonUnreachable, gitsource.ReasonTimeout, gitsource.ReasonFailed:
		return reconciler.Retry(string(ge.Reason), err)
	}
	return reconciler.Stall(string(ge.Reason), "%s", err.Error())
}
