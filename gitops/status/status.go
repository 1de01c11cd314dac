// Package status computes a GitRepo's status from what one pass of its
// reconciler observed: the restrictions' verdict, the outcome of reading
// the repository, and the GitRepo's Bundles (labelled
// fleet.cattle.io/repo-name in its namespace) with their BundleDeployments.
// Pure functions (cluster-api style), so every case is a table entry.
//
// The lists the status holds are bounded, so a GitRepo's status stays below
// etcd's 1.5 MiB request limit whatever the repository or the number of
// clusters (Fleet users hit that limit, rancher/fleet#3482): at most
// MaxResources resources in MaxResourceEntryBytes, MaxClusterIDBytes of
// cluster names in their perClusterState lists, MaxClusterCounts clusters
// in perClusterResourceCounts, 10 BundleDeployments in
// summary.nonReadyResources (with 3 resources each), and MaxMessage bytes
// per message: about 1 MiB if every name had the longest length Kubernetes
// allows, a few hundred KiB in practice.
package status

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller/summary"
	"github.com/gitops-fleet/fleet/gitops/restriction"
	"github.com/gitops-fleet/fleet/internal/reconciler"
)

// Bounds of the lists and messages of a GitRepo's status.
const (
	// MaxResources and MaxResourceEntryBytes bound status.resources: the
	// first resources (by type and id), at most 1000 and 256 KiB of them
	// without their cluster lists.
	MaxResources          = 1000
	MaxResourceEntryBytes = 256 << 10
	// MaxClusterIDBytes bounds the cluster names over every
	// resources[].perClusterState list (so resources take at most 512 KiB
	// in all); a resource whose lists were cut has incompleteState.
	MaxClusterIDBytes = 256 << 10
	// MaxClusterCounts bounds status.perClusterResourceCounts (the first
	// clusters by namespace/name).
	MaxClusterCounts = 1000
	// MaxMessage bounds display.message, the conditions' messages and each
	// resource's message.
	MaxMessage = 4096
	// maxResourceMessage bounds one resource's message.
	maxResourceMessage = 256
	// maxListedBundles bounds the Bundles a message names.
	maxListedBundles = 3
)

// Display states besides the BundleDeployment states.
const (
	// GitUpdatingState: the source component is reading a new commit or
	// generation (Fleet's name).
	GitUpdatingState = "GitUpdating"
)

// Values of status.gitJobStatus (kstatus's, as Fleet's Job status was).
const (
	SyncCurrent    = "Current"
	SyncInProgress = "InProgress"
	SyncFailed     = "Failed"
)

// Rules are the GitRepo's kstatus conditions (Ready, Reconciling, Stalled),
// set from a pass's outcome as every fleet controller sets them.
var Rules = reconciler.Conditions{Ready: fleet.ReadyCondition, Failing: "reading the repository failed"}

// Owned are the condition types Compute writes (for the status patch).
func Owned() []string { return append(Rules.Owned(), fleet.GitRepoAcceptedCondition) }

// Observed is what one pass of the GitRepo reconciler saw.
type Observed struct {
	// Refusal is restriction.Evaluate's verdict; nil: accepted.
	Refusal *restriction.Refusal
	// Sync is how reading the repository ended: nil when the Bundles are
	// made from status.commit; a *reconciler.Waiting while a new commit or
	// generation is read; a *reconciler.Stalled when the user must act
	// (credentials refused, a path's fleet.yaml invalid: the message names
	// the path and field); any other error is transient (retried).
	Sync error
	// Bundles are the GitRepo's Bundles: those of its namespace labelled
	// fleet.cattle.io/repo-name=<name>. Others are ignored.
	Bundles []fleet.Bundle
	// BundleDeployments are theirs: labelled fleet.cattle.io/repo-name and
	// fleet.cattle.io/bundle-namespace for the GitRepo. Others are ignored.
	BundleDeployments []fleet.BundleDeployment
}

// Compute returns the GitRepo's status after a pass that observed obs, at
// now. The git side's fields (commit, pollingCommit, webhookCommit, the
// times) are kept as they are; the caller sets them. observedGeneration
// moves to the GitRepo's generation only when it was accepted and its
// repository read.
func Compute(repo *fleet.GitRepo, obs Observed, now time.Time) fleet.GitRepoStatus {
	r := repo.DeepCopy()
	st := &r.Status
	bundles := ownBundles(repo, obs.Bundles)
	bds := ownDeployments(repo, obs.BundleDeployments)

	base := fromDeployments(bds)
	base.Conditions = st.Conditions
	st.StatusBase = base

	out := outcome(repo, obs, bundles, bds, st.Summary)
	Rules.Set(r, out, now)
	accepted := metav1.Condition{
		Type: fleet.GitRepoAcceptedCondition, Status: metav1.ConditionTrue, Reason: fleet.GitRepoAcceptedCondition,
		ObservedGeneration: repo.Generation, LastTransitionTime: metav1.NewTime(now),
	}
	if obs.Refusal != nil {
		accepted.Status, accepted.Reason, accepted.Message = metav1.ConditionFalse, obs.Refusal.Reason(), shorten(obs.Refusal.Error())
	}
	meta.SetStatusCondition(&st.Conditions, accepted)

	switch out.Kind() {
	case reconciler.KindSucceeded:
		st.GitJobStatus = SyncCurrent
	case reconciler.KindWaiting:
		st.GitJobStatus = SyncCurrent
		if obs.Sync != nil {
			st.GitJobStatus = SyncInProgress
			st.Display.State = GitUpdatingState
		}
	case reconciler.KindStalled, reconciler.KindTransient:
		st.GitJobStatus = SyncCurrent
		if obs.Refusal != nil || obs.Sync != nil {
			st.GitJobStatus = SyncFailed
		}
		// What the user must fix is the message to show, before any
		// BundleDeployment's.
		st.Display.Message, st.Display.Error = shorten(out.Err.Error()), true
	}
	if obs.Refusal == nil && obs.Sync == nil {
		st.ObservedGeneration = repo.Generation
	}
	return *st
}

// outcome is what the pass came to, most fundamental first: refused by a
// restriction; the repository not read (stalled, waiting or failing); a
// Bundle that cannot be deployed until the repository changes; Bundles or
// BundleDeployments not ready yet; ready.
func outcome(repo *fleet.GitRepo, obs Observed, bundles []*fleet.Bundle, bds []fleet.BundleDeployment, s fleet.BundleSummary) reconciler.Outcome {
	switch {
	case obs.Refusal != nil:
		return reconciler.Failure(reconciler.Stall(obs.Refusal.Reason(), "%s", shorten(obs.Refusal.Error())))
	case obs.Sync != nil:
		return reconciler.Failure(bounded(obs.Sync))
	}
	if reason, msg := stalledBundles(bundles); reason != "" {
		return reconciler.Failure(reconciler.Stall(reason, "%s", shorten(msg)))
	}
	if msg := notReady(bundles, bds, s); msg != "" {
		return reconciler.Failure(reconciler.Wait(fleet.BundlesNotReadyReason, 0, "%s", shorten(msg)))
	}
	if len(bundles) == 0 {
		return reconciler.Success(fleet.NoBundlesReason, "%s", shorten(noBundles(repo)))
	}
	if len(bds) == 0 {
		return reconciler.Success(fleet.NoBundlesReason, "the %d Bundle(s) of the repository target no cluster", len(bundles))
	}
	return reconciler.Success(fleet.SucceededReason, "")
}

// bounded is the sync's error with its message cut to MaxMessage, of the
// same kind (stalled, waiting, retrying with its reason, raced, transient),
// so no message from git or a fleet.yaml can make the status too large for
// the API server (a condition's message holds at most 32768 bytes).
func bounded(err error) error {
	var (
		s *reconciler.Stalled
		w *reconciler.Waiting
		r *reconciler.Retrying
	)
	switch {
	case errors.As(err, &s):
		return &reconciler.Stalled{Reason: s.Reason, Message: shorten(s.Message)}
	case errors.As(err, &w):
		c := *w
		c.Message = shorten(w.Message)
		return &c
	case reconciler.Failure(err).Kind() == reconciler.KindRaced:
		return err
	case errors.As(err, &r):
		return reconciler.Retry(r.Reason, errors.New(shorten(r.Err.Error())))
	case len(err.Error()) > MaxMessage:
		return errors.New(shorten(err.Error()))
	}
	return err
}

func noBundles(repo *fleet.GitRepo) string {
	paths := repo.Spec.Paths
	if len(paths) == 0 {
		paths = []string{"/"}
	}
	return fmt.Sprintf("commit %q of %s has no Bundle under paths %q", repo.Status.Commit, restriction.RedactURL(repo.Spec.Repo), paths)
}

// stalledBundles: the Bundles whose Stalled condition is True (a render
// failed, an option not supported, too large) wait for a new commit; the
// reason is the first's, the message names up to three.
func stalledBundles(bundles []*fleet.Bundle) (reason, msg string) {
	var parts []string
	n := 0
	for _, b := range bundles {
		c := meta.FindStatusCondition(b.Status.Conditions, fleet.StalledCondition)
		if c == nil || c.Status != metav1.ConditionTrue {
			continue
		}
		n++
		if reason == "" {
			reason = c.Reason
		}
		if len(parts) < maxListedBundles {
			parts = append(parts, fmt.Sprintf("Bundle %s: %s", b.Name, c.Message))
		}
	}
	if n > len(parts) {
		parts = append(parts, fmt.Sprintf("and %d more Bundle(s)", n-len(parts)))
	}
	return reason, strings.Join(parts, "; ")
}

// notReady says why the GitRepo is not ready yet: Bundles the controller has
// not caught up with (their generation), Bundles not ready that have no
// BundleDeployment to say why, then the BundleDeployments that are not
// ready; "" when all are.
func notReady(bundles []*fleet.Bundle, bds []fleet.BundleDeployment, s fleet.BundleSummary) string {
	deployed := map[string]bool{}
	for _, bd := range bds {
		deployed[bd.Labels[fleet.BundleLabel]] = true
	}
	var parts []string
	n := 0
	for _, b := range bundles {
		c := meta.FindStatusCondition(b.Status.Conditions, fleet.ReadyCondition)
		var why string
		switch {
		case b.Status.ObservedGeneration < b.Generation || c == nil || c.ObservedGeneration < b.Generation:
			why = "not yet processed by the controller"
		case c.Status != metav1.ConditionTrue && !deployed[b.Name]:
			why = cmp.Or(c.Message, c.Reason)
		default:
			continue
		}
		n++
		if len(parts) < maxListedBundles {
			parts = append(parts, fmt.Sprintf("Bundle %s: %s", b.Name, why))
		}
	}
	if n > len(parts) {
		parts = append(parts, fmt.Sprintf("and %d more Bundle(s)", n-len(parts)))
	}
	if s.Ready < s.DesiredReady {
		parts = append(parts, summary.ReadyMessage(s))
	}
	return strings.Join(parts, "; ")
}

func ownBundles(repo *fleet.GitRepo, all []fleet.Bundle) []*fleet.Bundle {
	var out []*fleet.Bundle
	for i := range all {
		b := &all[i]
		if b.Namespace == repo.Namespace && b.Labels[fleet.RepoLabel] == repo.Name {
			out = append(out, b)
		}
	}
	slices.SortFunc(out, func(a, b *fleet.Bundle) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func ownDeployments(repo *fleet.GitRepo, all []fleet.BundleDeployment) []fleet.BundleDeployment {
	var out []fleet.BundleDeployment
	for _, bd := range all {
		if bd.Labels[fleet.RepoLabel] == repo.Name && bd.Labels[fleet.BundleNamespaceLabel] == repo.Namespace {
			out = append(out, bd)
		}
	}
	// A stable order, so an unchanged state writes an unchanged status.
	slices.SortFunc(out, func(a, b fleet.BundleDeployment) int {
		return cmp.Or(strings.Compare(clusterID(a), clusterID(b)), strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name))
	})
	return out
}

// clusterID names a BundleDeployment's Cluster as Fleet's status does:
// "<cluster namespace>/<cluster name>", from the labels the Bundle
// reconciler sets.
func clusterID(bd fleet.BundleDeployment) string {
	return bd.Labels[fleet.ClusterNamespaceLabel] + "/" + bd.Labels[fleet.ClusterLabel]
}

// fromDeployments folds the BundleDeployments into the status Fleet shows:
// the summary, ready and desired clusters, the display, the resources and
// their counts.
func fromDeployments(bds []fleet.BundleDeployment) fleet.StatusBase {
	var st fleet.StatusBase
	st.Summary = summary.Summarize(bds)
	st.Display.ReadyBundleDeployments = fmt.Sprintf("%d/%d", st.Summary.Ready, st.Summary.DesiredReady)

	var worst fleet.BundleState
	clusters := map[string]bool{} // cluster → every BundleDeployment there is ready
	for i := range bds {
		bd := &bds[i]
		state := summary.State(bd)
		if fleet.StateRank[state] > fleet.StateRank[worst] {
			worst = state
			st.Display.Message = shorten(summary.Message(bd))
		}
		id := clusterID(*bd)
		ready, seen := clusters[id]
		clusters[id] = (ready || !seen) && state == fleet.Ready
	}
	if worst == fleet.Ready {
		worst, st.Display.Message = "", ""
	}
	st.Display.State = string(worst)
	st.Display.Error = st.Display.Message != ""
	st.DesiredReadyClusters = len(clusters)
	for _, ready := range clusters {
		if ready {
			st.ReadyClusters++
		}
	}

	st.ResourceCounts = summary.ResourceCounts(bds)
	st.PerClusterResourceCounts = perCluster(bds)
	st.Resources = resources(bds)
	return st
}

func perCluster(bds []fleet.BundleDeployment) map[string]*fleet.ResourceCounts {
	counts := map[string]*fleet.ResourceCounts{}
	for _, bd := range bds {
		id := clusterID(bd)
		if counts[id] == nil {
			counts[id] = &fleet.ResourceCounts{}
		}
		counts[id].Add(bd.Status.ResourceCounts)
	}
	if len(counts) == 0 {
		return nil
	}
	ids := slices.Sorted(maps.Keys(counts))
	for _, id := range ids[min(len(ids), MaxClusterCounts):] {
		delete(counts, id)
	}
	return counts
}

// entry is one resource's state on one cluster.
type entry struct {
	cluster       string
	state         string
	incomplete    bool
	error         bool
	transitioning bool
	message       string
}

// resources lists every resource of the BundleDeployments with its state
// per cluster, as Fleet does: the BundleDeployment's state for all its
// resources (Ready when the BundleDeployment is only NotReady or Modified,
// since its lists name the resources at fault; Unknown when those lists
// were cut), then its non-ready and modified resources' own states.
func resources(bds []fleet.BundleDeployment) []fleet.Resource {
	byKey := map[fleet.ResourceKey][]entry{}
	for _, bd := range bds {
		id := clusterID(bd)
		states := map[fleet.ResourceKey]entry{}
		def := defaultState(&bd)
		for _, r := range bd.Status.Resources {
			states[fleet.ResourceKey{Kind: r.Kind, APIVersion: r.APIVersion, Namespace: r.Namespace, Name: r.Name}] = entry{state: def}
		}
		for _, r := range bd.Status.NonReadyStatus {
			states[fleet.ResourceKey{Kind: r.Kind, APIVersion: r.APIVersion, Namespace: r.Namespace, Name: r.Name}] = entry{
				state: nonReadyState(r.Summary.State), error: r.Summary.Error, transitioning: r.Summary.Transitioning,
				message: strings.Join(r.Summary.Message, "; "),
			}
		}
		for _, r := range bd.Status.ModifiedStatus {
			state := "Modified"
			switch {
			case r.Delete:
				state = "Orphaned"
			case r.Create:
				state = "Missing"
			}
			states[fleet.ResourceKey{Kind: r.Kind, APIVersion: r.APIVersion, Namespace: r.Namespace, Name: r.Name}] = entry{state: state}
		}
		for k, e := range states {
			e.cluster, e.incomplete = id, bd.Status.IncompleteState
			byKey[k] = append(byKey[k], e)
		}
	}

	out := make([]fleet.Resource, 0, len(byKey))
	for k, entries := range byKey {
		slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.cluster, b.cluster) })
		r := fleet.Resource{
			Kind: k.Kind, APIVersion: k.APIVersion, Namespace: k.Namespace, Name: k.Name,
			Type: resourceType(k.APIVersion, k.Kind), ID: resourceID(k.Namespace, k.Name),
			State: string(fleet.Ready),
		}
		for _, e := range entries {
			if r.State == string(fleet.Ready) && e.state != string(fleet.Ready) {
				r.State = e.state
			}
			if r.Message == "" && e.message != "" {
				r.Message = shortenTo(e.message, maxResourceMessage)
			}
			r.IncompleteState = r.IncompleteState || e.incomplete
			r.Error = r.Error || e.error
			r.Transitioning = r.Transitioning || e.transitioning
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b fleet.Resource) int {
		return cmp.Or(strings.Compare(a.Type+"/"+a.ID, b.Type+"/"+b.ID), strings.Compare(a.APIVersion, b.APIVersion))
	})

	// The first resources, as many as the bounds hold, then their clusters
	// as long as the names' budget lasts.
	n, size := 0, 0
	for n < len(out) && n < MaxResources {
		size += entrySize(&out[n])
		if size > MaxResourceEntryBytes {
			break
		}
		n++
	}
	out = out[:n]
	budget := MaxClusterIDBytes
	for i := range out {
		r := &out[i]
		for _, e := range byKey[fleet.ResourceKey{Kind: r.Kind, APIVersion: r.APIVersion, Namespace: r.Namespace, Name: r.Name}] {
			if cost := len(e.cluster) + len(`"",`); cost <= budget {
				budget -= cost
				appendCluster(&r.PerClusterState, e.state, e.cluster)
				continue
			}
			r.IncompleteState = true
		}
	}
	return out
}

// entrySize is about the size of a resource's JSON without its cluster
// lists: its strings and the field names (160 bytes with every one set).
func entrySize(r *fleet.Resource) int {
	return 160 + len(r.APIVersion) + len(r.Kind) + len(r.Type) + len(r.ID) + len(r.Namespace) + len(r.Name) + len(r.State) + len(r.Message)
}

// defaultState is the state of a BundleDeployment's resources that its
// non-ready and modified lists do not name.
func defaultState(bd *fleet.BundleDeployment) string {
	switch s := summary.State(bd); s {
	case fleet.NotReady, fleet.Modified:
		if bd.Status.IncompleteState {
			return "Unknown"
		}
		return string(fleet.Ready)
	default:
		return string(s)
	}
}

// nonReadyState is the resource state of a non-ready resource's summary
// (fleet.SummaryOf's states).
func nonReadyState(s string) string {
	switch s {
	case "missing":
		return "Missing"
	case "unknown":
		return "Unknown"
	case "active", "":
		return string(fleet.Ready)
	default: // in-progress, error, removing
		return string(fleet.NotReady)
	}
}

// appendCluster lists a cluster under a resource state. Fleet's lists have
// no ErrApplied or OutOfSync: a resource whose BundleDeployment failed to
// apply is listed as waiting to be applied, one whose newer deployment is
// held back (paused, a rollout partition) as pending.
func appendCluster(p *fleet.PerClusterState, state, cluster string) {
	switch fleet.BundleState(state) {
	case fleet.Ready:
		p.Ready = append(p.Ready, cluster)
	case fleet.WaitApplied, fleet.ErrApplied:
		p.WaitApplied = append(p.WaitApplied, cluster)
	case fleet.Pending, fleet.OutOfSync:
		p.Pending = append(p.Pending, cluster)
	case fleet.Modified:
		p.Modified = append(p.Modified, cluster)
	case fleet.NotReady:
		p.NotReady = append(p.NotReady, cluster)
	case "Orphaned":
		p.Orphaned = append(p.Orphaned, cluster)
	case "Missing":
		p.Missing = append(p.Missing, cluster)
	default:
		p.Unknown = append(p.Unknown, cluster)
	}
}

// resourceType is Fleet's type of a resource: the lower-case kind, prefixed
// by the API group and a dot unless it is the core group.
func resourceType(apiVersion, kind string) string {
	group, _, ok := strings.Cut(apiVersion, "/")
	if !ok || group == "" {
		return strings.ToLower(kind)
	}
	return group + "." + strings.ToLower(kind)
}

func resourceID(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

func shorten(s string) string { return shortenTo(s, MaxMessage) }

// shortenTo cuts s to at most n bytes, on a rune boundary.
func shortenTo(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("...")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// ClusterGitRepos says what a Cluster's status.readyGitRepos and
// desiredReadyGitRepos are: of the GitRepos with a BundleDeployment on the
// cluster (bds are the cluster's BundleDeployments; exists says whether a
// GitRepo still exists, so leftovers of a deleted one do not count), how
// many there are, and how many have every one of their BundleDeployments
// there Ready. (Fleet counts a GitRepo ready when any one of them is.)
func ClusterGitRepos(bds []fleet.BundleDeployment, exists func(namespace, name string) bool) (ready, desired int) {
	type key struct{ namespace, name string }
	repos := map[key]bool{}
	for i := range bds {
		bd := &bds[i]
		k := key{bd.Labels[fleet.BundleNamespaceLabel], bd.Labels[fleet.RepoLabel]}
		if k.namespace == "" || k.name == "" {
			continue
		}
		r, seen := repos[k]
		repos[k] = (r || !seen) && summary.State(bd) == fleet.Ready
	}
	for k, r := range repos {
		if !exists(k.namespace, k.name) {
			continue
		}
		desired++
		if r {
			ready++
		}
	}
	return ready, desired
}
