package status

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/gitops/restriction"
	"github.com/gitops-fleet/fleet/internal/reconciler"
)

const ws = "fleet-default"

var t0 = time.Date(2026, 12, 5, 7, 0, 0, 0, time.UTC)

func gitRepo() *fleet.GitRepo {
	return &fleet.GitRepo{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "apps", Generation: 3},
		Spec:       fleet.GitRepoSpec{Repo: "https://github.com/example/apps", Paths: []string{"web", "db"}},
		Status:     fleet.GitRepoStatus{Commit: "c0ffee", PollingCommit: "c0ffee", ObservedGeneration: 2},
	}
}

// bundle is a Bundle of the GitRepo the controller has processed, Ready.
func bundle(name string, mod ...func(*fleet.Bundle)) fleet.Bundle {
	b := fleet.Bundle{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: name, Generation: 1, Labels: map[string]string{fleet.RepoLabel: "apps"}},
		Status: fleet.BundleStatus{ObservedGeneration: 1, Conditions: []metav1.Condition{
			{Type: fleet.ReadyCondition, Status: metav1.ConditionTrue, Reason: fleet.SucceededReason, ObservedGeneration: 1},
		}},
	}
	for _, m := range mod {
		m(&b)
	}
	return b
}

// stalled makes a Bundle Stalled with reason and message.
func stalled(reason, msg string) func(*fleet.Bundle) {
	return func(b *fleet.Bundle) {
		b.Status.Conditions = []metav1.Condition{
			{Type: fleet.ReadyCondition, Status: metav1.ConditionFalse, Reason: reason, Message: msg, ObservedGeneration: 1},
			{Type: fleet.StalledCondition, Status: metav1.ConditionTrue, Reason: reason, Message: msg, ObservedGeneration: 1},
		}
	}
}

// bd is the BundleDeployment of Bundle b on cluster c of workspace ws, in
// the given state (summary.State's rules).
func bd(b, c string, state fleet.BundleState, mod ...func(*fleet.BundleDeployment)) fleet.BundleDeployment {
	d := fleet.BundleDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "cluster-" + c, Name: b, Generation: 1, Labels: map[string]string{
			fleet.RepoLabel: "apps", fleet.BundleLabel: b, fleet.BundleNamespaceLabel: ws,
			fleet.ClusterLabel: c, fleet.ClusterNamespaceLabel: ws,
		}},
		Spec:   fleet.BundleDeploymentSpec{DeploymentID: "d1"},
		Status: fleet.BundleDeploymentStatus{AppliedDeploymentID: "d1", Ready: true, NonModified: true},
	}
	switch state {
	case fleet.NotReady:
		d.Status.Ready = false
		d.Status.Conditions = []metav1.Condition{{Type: fleet.ReadyCondition, Status: metav1.ConditionFalse, Reason: fleet.NotReadyReason, Message: "not ready: Deployment web: in-progress"}}
	case fleet.Modified:
		d.Status.NonModified = false
	case fleet.WaitApplied:
		d.Spec.DeploymentID = "d2"
	case fleet.ErrApplied:
		d.Spec.DeploymentID = "d2"
		d.Status.Conditions = []metav1.Condition{{Type: fleet.DeployedCondition, Status: metav1.ConditionFalse, Reason: fleet.ApplyFailedReason, Message: "apply failed", ObservedGeneration: 1}}
	case fleet.OutOfSync:
		d.Spec.StagedDeploymentID = "d2"
	}
	for _, m := range mod {
		m(&d)
	}
	return d
}

type condition struct {
	status  metav1.ConditionStatus
	reason  string
	message string // words the message holds
}

// TestCompute: the GitRepo's conditions, display, summary, clusters and
// observedGeneration for each way a pass can end: refused by a restriction,
// the repository being read, failing or impossible to read, a Bundle that
// cannot be deployed, Bundles or BundleDeployments not ready yet, nothing
// to deploy, all ready; objects of another GitRepo are not counted.
func TestCompute(t *testing.T) {
	refusal := &restriction.Refusal{Problems: []restriction.Problem{{Reason: fleet.RestrictionRefusedReason, Field: "spec.repo", Message: `spec.repo "https://evil.example/x" matches none of the allowedRepoPatterns`}}}
	readyBundles := []fleet.Bundle{bundle("apps-web"), bundle("apps-db")}
	readyBDs := []fleet.BundleDeployment{bd("apps-web", "c1", fleet.Ready), bd("apps-db", "c1", fleet.Ready), bd("apps-web", "c2", fleet.Ready)}
	for _, tc := range []struct {
		name string
		repo func(*fleet.GitRepo)
		obs  Observed
		// conditions by type; a type not listed must be absent.
		want                map[string]condition
		display             fleet.StatusDisplay
		ready, desired      int
		observedGeneration  int64
		gitJobStatus        string
		displayMessageHolds string
	}{
		{
			name: "all ready",
			obs:  Observed{Bundles: readyBundles, BundleDeployments: readyBDs},
			want: map[string]condition{
				fleet.ReadyCondition:           {metav1.ConditionTrue, fleet.SucceededReason, ""},
				fleet.GitRepoAcceptedCondition: {metav1.ConditionTrue, fleet.GitRepoAcceptedCondition, ""},
			},
			display: fleet.StatusDisplay{ReadyBundleDeployments: "3/3"}, ready: 2, desired: 2, observedGeneration: 3, gitJobStatus: SyncCurrent,
		},
		{
			name: "refused by a restriction: stalled, whatever the Bundles say",
			obs:  Observed{Refusal: refusal, Bundles: readyBundles, BundleDeployments: readyBDs},
			want: map[string]condition{
				fleet.ReadyCondition:           {metav1.ConditionFalse, fleet.RestrictionRefusedReason, "allowedRepoPatterns"},
				fleet.StalledCondition:         {metav1.ConditionTrue, fleet.RestrictionRefusedReason, "allowedRepoPatterns"},
				fleet.GitRepoAcceptedCondition: {metav1.ConditionFalse, fleet.RestrictionRefusedReason, "https://evil.example/x"},
			},
			display: fleet.StatusDisplay{ReadyBundleDeployments: "3/3", Error: true}, displayMessageHolds: "allowedRepoPatterns",
			ready: 2, desired: 2, observedGeneration: 2, gitJobStatus: SyncFailed,
		},
		{
			name: "a new commit being read",
			obs: Observed{Sync: reconciler.Wait(fleet.ProgressingReason, 0, "reading commit %s", "beef"),
				Bundles: readyBundles, BundleDeployments: readyBDs},
			want: map[string]condition{
				fleet.ReadyCondition:           {metav1.ConditionFalse, fleet.ProgressingReason, "reading commit beef"},
				fleet.ReconcilingCondition:     {metav1.ConditionTrue, fleet.ProgressingReason, "reading commit beef"},
				fleet.GitRepoAcceptedCondition: {metav1.ConditionTrue, fleet.GitRepoAcceptedCondition, ""},
			},
			display: fleet.StatusDisplay{ReadyBundleDeployments: "3/3", State: GitUpdatingState},
			ready:   2, desired: 2, observedGeneration: 2, gitJobStatus: SyncInProgress,
		},
		{
			name: "a path's fleet.yaml is invalid: stalled, naming the path",
			obs: Observed{Sync: reconciler.Stall("FleetYAMLInvalid", "path db: fleet.yaml: helm.chart: %s", "not a string"),
				Bundles: readyBundles, BundleDeployments: readyBDs},
			want: map[string]condition{
				fleet.ReadyCondition:           {metav1.ConditionFalse, "FleetYAMLInvalid", "path db: fleet.yaml: helm.chart"},
				fleet.StalledCondition:         {metav1.ConditionTrue, "FleetYAMLInvalid", "path db"},
				fleet.GitRepoAcceptedCondition: {metav1.ConditionTrue, fleet.GitRepoAcceptedCondition, ""},
			},
			display: fleet.StatusDisplay{ReadyBundleDeployments: "3/3", Error: true}, displayMessageHolds: "path db",
			ready: 2, desired: 2, observedGeneration: 2, gitJobStatus: SyncFailed,
		},
		{
			name: "the git server does not answer: retried",
			obs:  Observed{Sync: errors.New("ls-remote https://github.com/example/apps: connection refused"), Bundles: readyBundles, BundleDeployments: readyBDs},
			want: map[string]condition{
				fleet.ReadyCondition:           {metav1.ConditionFalse, fleet.ProgressingReason, "reading the repository failed, retrying: ls-remote"},
				fleet.ReconcilingCondition:     {metav1.ConditionTrue, fleet.ProgressingReason, "connection refused"},
				fleet.GitRepoAcceptedCondition: {metav1.ConditionTrue, fleet.GitRepoAcceptedCondition, ""},
			},
			display: fleet.StatusDisplay{ReadyBundleDeployments: "3/3", Error: true}, displayMessageHolds: "connection refused",
			ready: 2, desired: 2, observedGeneration: 2, gitJobStatus: SyncFailed,
		},
		{
			name: "a BundleDeployment not ready on one cluster",
			obs: Observed{Bundles: readyBundles, BundleDeployments: []fleet.BundleDeployment{
				bd("apps-web", "c1", fleet.Ready), bd("apps-db", "c1", fleet.NotReady), bd("apps-web", "c2", fleet.Ready)}},
			want: map[string]condition{
				fleet.ReadyCondition:           {metav1.ConditionFalse, fleet.BundlesNotReadyReason, "NotReady(1) [cluster-c1/apps-db: not ready: Deployment web"},
				fleet.ReconcilingCondition:     {metav1.ConditionTrue, fleet.BundlesNotReadyReason, "NotReady(1)"},
				fleet.GitRepoAcceptedCondition: {metav1.ConditionTrue, fleet.GitRepoAcceptedCondition, ""},
			},
			display: fleet.StatusDisplay{ReadyBundleDeployments: "2/3", State: "NotReady", Error: true}, displayMessageHolds: "Deployment web",
			ready: 1, desired: 2, observedGeneration: 3, gitJobStatus: SyncCurrent,
		},
		{
			name: "the worst state is shown",
			obs: Observed{Bundles: readyBundles, BundleDeployments: []fleet.BundleDeployment{
				bd("apps-web", "c1", fleet.Modified), bd("apps-db", "c1", fleet.ErrApplied), bd("apps-web", "c2", fleet.OutOfSync)}},
			want: map[string]condition{
				fleet.ReadyCondition:           {metav1.ConditionFalse, fleet.BundlesNotReadyReason, "ErrApplied(1)"},
				fleet.ReconcilingCondition:     {metav1.ConditionTrue, fleet.BundlesNotReadyReason, "Modified(1)"},
				fleet.GitRepoAcceptedCondition: {metav1.ConditionTrue, fleet.GitRepoAcceptedCondition, ""},
			},
			display: fleet.StatusDisplay{ReadyBundleDeployments: "0/3", State: "ErrApplied", Error: true}, displayMessageHolds: "apply failed",
			ready: 0, desired: 2, observedGeneration: 3, gitJobStatus: SyncCurrent,
		},
		{
			name: "a Bundle that cannot be rendered: stalled, naming it",
			obs: Observed{
				Bundles:           []fleet.Bundle{bundle("apps-web"), bundle("apps-db", stalled(fleet.RenderFailedReason, "helm: template: db/templates/x.yaml:3: bad"))},
				BundleDeployments: []fleet.BundleDeployment{bd("apps-web", "c1", fleet.Ready)},
			},
			want: map[string]condition{
				fleet.ReadyCondition:           {metav1.ConditionFalse, fleet.RenderFailedReason, "Bundle apps-db: helm: template"},
				fleet.StalledCondition:         {metav1.ConditionTrue, fleet.RenderFailedReason, "Bundle apps-db"},
				fleet.GitRepoAcceptedCondition: {metav1.ConditionTrue, fleet.GitRepoAcceptedCondition, ""},
			},
			display: fleet.StatusDisplay{ReadyBundleDeployments: "1/1", Error: true}, displayMessageHolds: "Bundle apps-db",
			ready: 1, desired: 1, observedGeneration: 3, gitJobStatus: SyncCurrent,
		},
		{
			name: "a Bundle the controller has not processed yet",
			obs: Observed{
				Bundles:           []fleet.Bundle{bundle("apps-web", func(b *fleet.Bundle) { b.Generation = 2 }), bundle("apps-db")},
				BundleDeployments: readyBDs,
			},
			want: map[string]condition{
				fleet.ReadyCondition:           {metav1.ConditionFalse, fleet.BundlesNotReadyReason, "Bundle apps-web: not yet processed"},
				fleet.ReconcilingCondition:     {metav1.ConditionTrue, fleet.BundlesNotReadyReason, "apps-web"},
				fleet.GitRepoAcceptedCondition: {metav1.ConditionTrue, fleet.GitRepoAcceptedCondition, ""},
			},
			display: fleet.StatusDisplay{ReadyBundleDeployments: "3/3"}, ready: 2, desired: 2, observedGeneration: 3, gitJobStatus: SyncCurrent,
		},
		{
			name: "a Bundle not ready without BundleDeployments says why",
			obs: Observed{
				Bundles: []fleet.Bundle{bundle("apps-web"), bundle("apps-db", func(b *fleet.Bundle) {
					b.Status.Conditions[0].Status, b.Status.Conditions[0].Reason, b.Status.Conditions[0].Message = metav1.ConditionFalse, fleet.TargetsInvalidReason, "clusterGroup prod does not exist"
				})},
				BundleDeployments: []fleet.BundleDeployment{bd("apps-web", "c1", fleet.Ready)},
			},
			want: map[string]condition{
				fleet.ReadyCondition:           {metav1.ConditionFalse, fleet.BundlesNotReadyReason, "Bundle apps-db: clusterGroup prod does not exist"},
				fleet.ReconcilingCondition:     {metav1.ConditionTrue, fleet.BundlesNotReadyReason, "apps-db"},
				fleet.GitRepoAcceptedCondition: {metav1.ConditionTrue, fleet.GitRepoAcceptedCondition, ""},
			},
			display: fleet.StatusDisplay{ReadyBundleDeployments: "1/1"}, ready: 1, desired: 1, observedGeneration: 3, gitJobStatus: SyncCurrent,
		},
		{
			name: "no Bundle: ready, saying so without the URL's credential",
			repo: func(r *fleet.GitRepo) { r.Spec.Repo = "https://user:s3cret@git.example.com/apps" },
			obs:  Observed{},
			want: map[string]condition{
				fleet.ReadyCondition:           {metav1.ConditionTrue, fleet.NoBundlesReason, `commit "c0ffee" of https://***@git.example.com/apps has no Bundle under paths ["web" "db"]`},
				fleet.GitRepoAcceptedCondition: {metav1.ConditionTrue, fleet.GitRepoAcceptedCondition, ""},
			},
			display: fleet.StatusDisplay{ReadyBundleDeployments: "0/0"}, observedGeneration: 3, gitJobStatus: SyncCurrent,
		},
		{
			name: "Bundles that target no cluster",
			obs:  Observed{Bundles: readyBundles},
			want: map[string]condition{
				fleet.ReadyCondition:           {metav1.ConditionTrue, fleet.NoBundlesReason, "target no cluster"},
				fleet.GitRepoAcceptedCondition: {metav1.ConditionTrue, fleet.GitRepoAcceptedCondition, ""},
			},
			display: fleet.StatusDisplay{ReadyBundleDeployments: "0/0"}, observedGeneration: 3, gitJobStatus: SyncCurrent,
		},
		{
			name: "another GitRepo's objects (same name elsewhere, another name here) are not counted",
			obs: Observed{
				Bundles: append([]fleet.Bundle{
					bundle("other-web", stalled(fleet.RenderFailedReason, "x"), func(b *fleet.Bundle) { b.Labels[fleet.RepoLabel] = "other" }),
					bundle("apps-web", stalled(fleet.RenderFailedReason, "x"), func(b *fleet.Bundle) { b.Namespace = "elsewhere" }),
				}, readyBundles...),
				BundleDeployments: append([]fleet.BundleDeployment{
					bd("other-web", "c3", fleet.NotReady, func(d *fleet.BundleDeployment) { d.Labels[fleet.RepoLabel] = "other" }),
					bd("apps-web", "c4", fleet.NotReady, func(d *fleet.BundleDeployment) { d.Labels[fleet.BundleNamespaceLabel] = "elsewhere" }),
				}, readyBDs...),
			},
			want: map[string]condition{
				fleet.ReadyCondition:           {metav1.ConditionTrue, fleet.SucceededReason, ""},
				fleet.GitRepoAcceptedCondition: {metav1.ConditionTrue, fleet.GitRepoAcceptedCondition, ""},
			},
			display: fleet.StatusDisplay{ReadyBundleDeployments: "3/3"}, ready: 2, desired: 2, observedGeneration: 3, gitJobStatus: SyncCurrent,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			repo := gitRepo()
			if tc.repo != nil {
				tc.repo(repo)
			}
			before := repo.DeepCopy()
			st := Compute(repo, tc.obs, t0)
			if d := cmp.Diff(before, repo); d != "" {
				t.Errorf("Compute changed its input (-before +after):\n%s", d)
			}
			for _, typ := range []string{fleet.ReadyCondition, fleet.ReconcilingCondition, fleet.StalledCondition, fleet.GitRepoAcceptedCondition} {
				c := meta.FindStatusCondition(st.Conditions, typ)
				want, ok := tc.want[typ]
				switch {
				case !ok && c != nil:
					t.Errorf("condition %s is set (%s %s: %s), want none", typ, c.Status, c.Reason, c.Message)
				case ok && c == nil:
					t.Errorf("condition %s is missing", typ)
				case ok:
					if c.Status != want.status || c.Reason != want.reason || !strings.Contains(c.Message, want.message) {
						t.Errorf("condition %s = %s %s %q, want %s %s holding %q", typ, c.Status, c.Reason, c.Message, want.status, want.reason, want.message)
					}
					if c.ObservedGeneration != repo.Generation || !c.LastTransitionTime.Time.Equal(t0) {
						t.Errorf("condition %s: observedGeneration %d at %s, want %d at %s", typ, c.ObservedGeneration, c.LastTransitionTime, repo.Generation, t0)
					}
				}
			}
			display := st.Display
			if tc.displayMessageHolds != "" && !strings.Contains(display.Message, tc.displayMessageHolds) {
				t.Errorf("display.message %q does not hold %q", display.Message, tc.displayMessageHolds)
			}
			display.Message = ""
			if d := cmp.Diff(tc.display, display); d != "" {
				t.Errorf("display (-want +got):\n%s", d)
			}
			if st.ReadyClusters != tc.ready || st.DesiredReadyClusters != tc.desired {
				t.Errorf("clusters %d/%d, want %d/%d", st.ReadyClusters, st.DesiredReadyClusters, tc.ready, tc.desired)
			}
			if st.ObservedGeneration != tc.observedGeneration {
				t.Errorf("observedGeneration %d, want %d", st.ObservedGeneration, tc.observedGeneration)
			}
			if st.GitJobStatus != tc.gitJobStatus {
				t.Errorf("gitJobStatus %q, want %q", st.GitJobStatus, tc.gitJobStatus)
			}
			if st.Commit != "c0ffee" || st.PollingCommit != "c0ffee" {
				t.Errorf("the git side's fields changed: commit %q, pollingCommit %q", st.Commit, st.PollingCommit)
			}
		})
	}
}

// TestCompute_TransitionTimesKept: a second pass that finds the same keeps
// every condition's lastTransitionTime (so an unchanged GitRepo writes an
// unchanged status); a change of status is stamped with the new time.
func TestCompute_TransitionTimesKept(t *testing.T) {
	repo := gitRepo()
	obs := Observed{Bundles: []fleet.Bundle{bundle("apps-web")}, BundleDeployments: []fleet.BundleDeployment{bd("apps-web", "c1", fleet.NotReady)}}
	repo.Status = Compute(repo, obs, t0)
	again := Compute(repo, obs, t0.Add(time.Minute))
	if d := cmp.Diff(repo.Status, again); d != "" {
		t.Errorf("the same observation changed the status (-first +second):\n%s", d)
	}
	obs.BundleDeployments = []fleet.BundleDeployment{bd("apps-web", "c1", fleet.Ready)}
	later := t0.Add(2 * time.Minute)
	ready := Compute(repo, obs, later)
	if c := meta.FindStatusCondition(ready.Conditions, fleet.ReadyCondition); c.Status != metav1.ConditionTrue || !c.LastTransitionTime.Time.Equal(later) {
		t.Errorf("Ready %s since %s, want True since %s", c.Status, c.LastTransitionTime, later)
	}
	if c := meta.FindStatusCondition(ready.Conditions, fleet.GitRepoAcceptedCondition); !c.LastTransitionTime.Time.Equal(t0) {
		t.Errorf("Accepted (unchanged) stamped %s, want %s", c.LastTransitionTime, t0)
	}
}

// TestCompute_Resources: each resource of the BundleDeployments with its
// state per cluster and overall (the first that is not Ready), as Fleet
// aggregates them: a BundleDeployment's listed non-ready and modified
// resources take their own state, the others its state (Ready when it is
// only NotReady or Modified); counts summed in total and per cluster.
func TestCompute_Resources(t *testing.T) {
	cm := fleet.BundleDeploymentResource{Kind: "ConfigMap", APIVersion: "v1", Namespace: "app", Name: "settings"}
	web := fleet.BundleDeploymentResource{Kind: "Deployment", APIVersion: "apps/v1", Namespace: "app", Name: "web"}
	crd := fleet.BundleDeploymentResource{Kind: "CustomResourceDefinition", APIVersion: "apiextensions.k8s.io/v1", Name: "widgets.example.com"}
	withResources := func(counts fleet.ResourceCounts, rs ...fleet.BundleDeploymentResource) func(*fleet.BundleDeployment) {
		return func(d *fleet.BundleDeployment) { d.Status.Resources, d.Status.ResourceCounts = rs, counts }
	}
	obs := Observed{
		Bundles: []fleet.Bundle{bundle("apps-web")},
		BundleDeployments: []fleet.BundleDeployment{
			bd("apps-web", "c1", fleet.Ready, withResources(fleet.ResourceCounts{Ready: 3, DesiredReady: 3}, cm, web, crd)),
			bd("apps-web", "c2", fleet.NotReady, withResources(fleet.ResourceCounts{Ready: 1, NotReady: 1, Modified: 1, DesiredReady: 3}, cm, web, crd), func(d *fleet.BundleDeployment) {
				d.Status.NonModified = false
				d.Status.NonReadyStatus = []fleet.NonReadyStatus{{Kind: "Deployment", APIVersion: "apps/v1", Namespace: "app", Name: "web",
					Summary: fleet.SummaryOf("InProgress", "0 of 2 replicas available")}}
				d.Status.ModifiedStatus = []fleet.ModifiedStatus{{Kind: "ConfigMap", APIVersion: "v1", Namespace: "app", Name: "settings", Patch: `{"data":{"color":"red"}}`}}
			}),
			bd("apps-web", "c3", fleet.WaitApplied, withResources(fleet.ResourceCounts{WaitApplied: 3, DesiredReady: 3}, cm, web, crd)),
		},
	}
	st := Compute(gitRepo(), obs, t0)
	want := []fleet.Resource{
		{Kind: "CustomResourceDefinition", APIVersion: "apiextensions.k8s.io/v1", Name: "widgets.example.com", Type: "apiextensions.k8s.io.customresourcedefinition",
			ID: "widgets.example.com", State: "WaitApplied",
			PerClusterState: fleet.PerClusterState{Ready: []string{ws + "/c1", ws + "/c2"}, WaitApplied: []string{ws + "/c3"}}},
		{Kind: "Deployment", APIVersion: "apps/v1", Namespace: "app", Name: "web", Type: "apps.deployment", ID: "app/web",
			State: "NotReady", Transitioning: true, Message: "0 of 2 replicas available",
			PerClusterState: fleet.PerClusterState{Ready: []string{ws + "/c1"}, NotReady: []string{ws + "/c2"}, WaitApplied: []string{ws + "/c3"}}},
		{Kind: "ConfigMap", APIVersion: "v1", Namespace: "app", Name: "settings", Type: "configmap", ID: "app/settings", State: "Modified",
			PerClusterState: fleet.PerClusterState{Ready: []string{ws + "/c1"}, Modified: []string{ws + "/c2"}, WaitApplied: []string{ws + "/c3"}}},
	}
	if d := cmp.Diff(want, st.Resources); d != "" {
		t.Errorf("resources (-want +got):\n%s", d)
	}
	if d := cmp.Diff(fleet.ResourceCounts{Ready: 4, NotReady: 1, Modified: 1, WaitApplied: 3, DesiredReady: 9}, st.ResourceCounts); d != "" {
		t.Errorf("resourceCounts (-want +got):\n%s", d)
	}
	wantPer := map[string]*fleet.ResourceCounts{
		ws + "/c1": {Ready: 3, DesiredReady: 3},
		ws + "/c2": {Ready: 1, NotReady: 1, Modified: 1, DesiredReady: 3},
		ws + "/c3": {WaitApplied: 3, DesiredReady: 3},
	}
	if d := cmp.Diff(wantPer, st.PerClusterResourceCounts); d != "" {
		t.Errorf("perClusterResourceCounts (-want +got):\n%s", d)
	}
	if n := len(st.Summary.NonReadyResources); n != 2 {
		t.Errorf("summary names %d non-ready BundleDeployments, want 2", n)
	}
}

// TestCompute_Bounded: a GitRepo on many clusters with many resources
// (1,100 clusters with long names; ten resources on every cluster, one of
// its own on each, not ready with a long message) gets a status with at
// most MaxResources resources, MaxClusterIDBytes of cluster names in their
// lists (the resources whose lists were cut say incompleteState), resource
// messages of at most 256 bytes and MaxClusterCounts per-cluster counts,
// whose JSON stays well below etcd's 1.5 MiB request limit. Totals still
// count every cluster.
func TestCompute_Bounded(t *testing.T) {
	const clusters, shared = 1100, 10
	long := strings.Repeat("x", 1000)
	bds := make([]fleet.BundleDeployment, clusters)
	for i := range bds {
		bds[i] = bd("apps-web", fmt.Sprintf("a-rather-long-cluster-name-of-some-region-%04d", i), fleet.NotReady, func(d *fleet.BundleDeployment) {
			for j := range shared {
				d.Status.Resources = append(d.Status.Resources, fleet.BundleDeploymentResource{Kind: "ConfigMap", APIVersion: "v1", Namespace: "app", Name: fmt.Sprintf("common-%02d", j)})
			}
			own := fmt.Sprintf("config-%04d", i)
			d.Status.Resources = append(d.Status.Resources, fleet.BundleDeploymentResource{Kind: "ConfigMap", APIVersion: "v1", Namespace: "app", Name: own})
			d.Status.NonReadyStatus = []fleet.NonReadyStatus{{Kind: "ConfigMap", APIVersion: "v1", Namespace: "app", Name: own, Summary: fleet.SummaryOf("InProgress", long)}}
			d.Status.ResourceCounts = fleet.ResourceCounts{Ready: shared, NotReady: 1, DesiredReady: shared + 1}
		})
	}
	st := Compute(gitRepo(), Observed{Bundles: []fleet.Bundle{bundle("apps-web")}, BundleDeployments: bds}, t0)

	idBytes, incomplete, entries := 0, 0, 0
	for _, r := range st.Resources {
		noLists := r
		noLists.PerClusterState = fleet.PerClusterState{}
		b, _ := json.Marshal(noLists)
		entries += len(b)
		p := r.PerClusterState
		for _, ids := range [][]string{p.Ready, p.WaitApplied, p.Pending, p.Modified, p.Orphaned, p.Missing, p.Unknown, p.NotReady} {
			for _, id := range ids {
				idBytes += len(id)
			}
		}
		if r.IncompleteState {
			incomplete++
		}
		if len(r.Message) > 256 {
			t.Errorf("resource %s: a message of %d bytes", r.ID, len(r.Message))
		}
	}
	if len(st.Resources) > MaxResources || len(st.Resources) < 300 || entries > MaxResourceEntryBytes {
		t.Errorf("%d resources, %d bytes of JSON without their lists; want at most %d and %d bytes (and most of that)", len(st.Resources), entries, MaxResources, MaxResourceEntryBytes)
	}
	if idBytes > MaxClusterIDBytes || idBytes < MaxClusterIDBytes/2 {
		t.Errorf("%d bytes of cluster names in perClusterState, want at most (and near) %d", idBytes, MaxClusterIDBytes)
	}
	if incomplete == 0 || !st.Resources[len(st.Resources)-1].IncompleteState || st.Resources[0].IncompleteState {
		t.Errorf("%d resources say incompleteState; want the ones after the budget ran out, and not the first", incomplete)
	}
	if len(st.PerClusterResourceCounts) != MaxClusterCounts {
		t.Errorf("%d per-cluster counts, want the bound %d", len(st.PerClusterResourceCounts), MaxClusterCounts)
	}
	if st.ResourceCounts.NotReady != clusters || st.DesiredReadyClusters != clusters || st.Summary.DesiredReady != clusters {
		t.Errorf("totals: %d not-ready resources, %d clusters, %d BundleDeployments; want %d of each", st.ResourceCounts.NotReady, st.DesiredReadyClusters, st.Summary.DesiredReady, clusters)
	}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 1<<20 {
		t.Errorf("the status is %d bytes of JSON, want at most 1 MiB (etcd takes 1.5 MiB per request)", len(b))
	}
	t.Logf("status of %d clusters, %d resources: %d bytes of JSON", clusters, clusters+shared, len(b))
}

// TestCompute_AtMostMaxResources: small resources are listed up to
// MaxResources, the first by type and id.
func TestCompute_AtMostMaxResources(t *testing.T) {
	d := bd("apps-web", "c1", fleet.Ready)
	for i := range 1500 {
		d.Status.Resources = append(d.Status.Resources, fleet.BundleDeploymentResource{Kind: "ConfigMap", APIVersion: "v1", Namespace: "a", Name: fmt.Sprintf("c-%04d", i)})
	}
	st := Compute(gitRepo(), Observed{Bundles: []fleet.Bundle{bundle("apps-web")}, BundleDeployments: []fleet.BundleDeployment{d}}, t0)
	if len(st.Resources) != MaxResources || st.Resources[0].Name != "c-0000" || st.Resources[MaxResources-1].Name != "c-0999" {
		t.Errorf("%d resources (%s ... %s), want c-0000 ... c-0999", len(st.Resources), st.Resources[0].Name, st.Resources[len(st.Resources)-1].Name)
	}
	if st.Resources[0].IncompleteState || len(st.Resources[0].PerClusterState.Ready) != 1 {
		t.Errorf("first resource %+v: want complete, ready on c1", st.Resources[0])
	}
}

// TestCompute_LongMessagesCut: a BundleDeployment's or a sync's message of
// any length is cut to MaxMessage bytes (on a rune boundary) in the
// conditions and display, which the API server limits to 32768.
func TestCompute_LongMessagesCut(t *testing.T) {
	long := strings.Repeat("é", 40000)
	st := Compute(gitRepo(), Observed{Sync: reconciler.Stall("FleetYAMLInvalid", "path x: %s", long)}, t0)
	c := meta.FindStatusCondition(st.Conditions, fleet.ReadyCondition)
	for what, msg := range map[string]string{"Ready": c.Message, "display.message": st.Display.Message} {
		if len(msg) > MaxMessage || !strings.HasSuffix(msg, "...") || !strings.HasPrefix(msg, "path x: é") {
			t.Errorf("%s: %d bytes (%q...), want at most %d ending in ...", what, len(msg), msg[:min(len(msg), 20)], MaxMessage)
		}
		if !utf8.ValidString(msg) {
			t.Errorf("%s was cut inside a rune", what)
		}
	}
}

// TestCompute_LongTransientErrorCut: a transient error of any length keeps
// its reason and is cut, so the condition stays within the API's limit.
func TestCompute_LongTransientErrorCut(t *testing.T) {
	err := reconciler.Retry("GitServerUnreachable", errors.New("ls-remote: "+strings.Repeat("x", 50000)))
	st := Compute(gitRepo(), Observed{Sync: err}, t0)
	c := meta.FindStatusCondition(st.Conditions, fleet.ReadyCondition)
	if c.Reason != "GitServerUnreachable" || len(c.Message) > MaxMessage+100 || !strings.Contains(c.Message, "retrying: ls-remote: xxx") {
		t.Errorf("Ready %s, a message of %d bytes (%.60s...); want reason GitServerUnreachable and about %d bytes", c.Reason, len(c.Message), c.Message, MaxMessage)
	}
}

// TestClusterGitRepos: a Cluster's readyGitRepos and desiredReadyGitRepos:
// a GitRepo counts when it still exists and has a BundleDeployment on the
// cluster, and is ready only when every one of them is Ready there (Fleet
// counts it ready when any one is).
func TestClusterGitRepos(t *testing.T) {
	other := func(repo string) func(*fleet.BundleDeployment) {
		return func(d *fleet.BundleDeployment) { d.Labels[fleet.RepoLabel] = repo }
	}
	bds := []fleet.BundleDeployment{
		bd("a-web", "c1", fleet.Ready, other("a")), bd("a-db", "c1", fleet.Ready, other("a")),
		bd("b-web", "c1", fleet.Ready, other("b")), bd("b-db", "c1", fleet.NotReady, other("b")),
		bd("gone-web", "c1", fleet.Ready, other("gone")),
		bd("manual", "c1", fleet.NotReady, func(d *fleet.BundleDeployment) { delete(d.Labels, fleet.RepoLabel) }),
	}
	exists := func(namespace, name string) bool { return namespace == ws && name != "gone" }
	ready, desired := ClusterGitRepos(bds, exists)
	if ready != 1 || desired != 2 {
		t.Errorf("readyGitRepos %d, desiredReadyGitRepos %d; want 1 (a), 2 (a, b)", ready, desired)
	}
	if ready, desired := ClusterGitRepos(nil, exists); ready != 0 || desired != 0 {
		t.Errorf("no BundleDeployments: %d/%d, want 0/0", ready, desired)
	}
}
