package reconciler_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	fluxconditions "github.com/fluxcd/pkg/runtime/conditions"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/reconciler"
)

// Every fleet kind with conditions satisfies flux's condition contract, so
// flux's helpers (used below to read what Set wrote) accept them.
var (
	_ fluxconditions.Setter = &fleet.Cluster{}
	_ fluxconditions.Setter = &fleet.ClusterGroup{}
	_ fluxconditions.Setter = &fleet.ClusterRegistration{}
	_ fluxconditions.Setter = &fleet.ClusterRegistrationToken{}
	_ fluxconditions.Setter = &fleet.Bundle{}
	_ fluxconditions.Setter = &fleet.BundleDeployment{}
)

var (
	t0      = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	ready   = reconciler.Conditions{Ready: fleet.ReadyCondition, Failing: "making the thing failed"}
	granted = reconciler.Conditions{Ready: fleet.GrantedCondition, Failing: "granting failed"}
)

func conflictErr() error {
	return fmt.Errorf("updating x: %w", apierrors.NewConflict(schema.GroupResource{Resource: "secrets"}, "x", errors.New("changed")))
}

func alreadyExistsErr() error {
	return fmt.Errorf("creating x: %w", apierrors.NewAlreadyExists(schema.GroupResource{Resource: "secrets"}, "x"))
}

// cond is a condition as the table expects it ("" status: absent).
type cond struct {
	status metav1.ConditionStatus
	reason string
}

func TestConditions_OutcomeToKstatus(t *testing.T) {
	for _, tc := range []struct {
		name                        string
		rules                       reconciler.Conditions
		out                         reconciler.Outcome
		wantKind                    reconciler.Kind
		wantReady, wantRec, wantSta cond
		wantMessage                 string
		// kstatus is what kstatus (cli-utils) computes from the result.
		kstatus status.Status
	}{
		{
			name: "succeeded", rules: ready, out: reconciler.Success(fleet.SucceededReason, "values Secret %s is ready", "s"),
			wantKind: reconciler.KindSucceeded, wantReady: cond{metav1.ConditionTrue, fleet.SucceededReason}, wantMessage: "values Secret s is ready",
			kstatus: status.CurrentStatus,
		},
		{
			name: "waiting", rules: ready, out: reconciler.Failure(reconciler.Wait("ObjectConflict", time.Minute, "Secret ns/x is taken")),
			wantKind: reconciler.KindWaiting, wantReady: cond{metav1.ConditionFalse, "ObjectConflict"}, wantRec: cond{metav1.ConditionTrue, "ObjectConflict"},
			wantMessage: "Secret ns/x is taken", kstatus: status.InProgressStatus,
		},
		{
			name: "wrapped wait", rules: ready, out: reconciler.Failure(fmt.Errorf("phase x: %w", reconciler.Wait(fleet.WaitingReason, 0, "waiting"))),
			wantKind: reconciler.KindWaiting, wantReady: cond{metav1.ConditionFalse, fleet.WaitingReason}, wantRec: cond{metav1.ConditionTrue, fleet.WaitingReason},
			wantMessage: "waiting", kstatus: status.InProgressStatus,
		},
		{
			name: "stalled", rules: granted, out: reconciler.Failure(reconciler.Stall(fleet.TokenNotFoundReason, "token gone: %s", "reinstall")),
			wantKind: reconciler.KindStalled, wantReady: cond{metav1.ConditionFalse, fleet.TokenNotFoundReason}, wantSta: cond{metav1.ConditionTrue, fleet.TokenNotFoundReason},
			wantMessage: "token gone: reinstall", kstatus: status.FailedStatus,
		},
		{
			name: "transient", rules: granted, out: reconciler.Failure(errors.New("boom")),
			wantKind: reconciler.KindTransient, wantReady: cond{metav1.ConditionFalse, fleet.ProgressingReason}, wantRec: cond{metav1.ConditionTrue, fleet.ProgressingReason},
			wantMessage: "granting failed, retrying: boom", kstatus: status.InProgressStatus,
		},
		{
			name: "transient with its own reason", rules: ready, out: reconciler.Failure(fmt.Errorf("pushing: %w", reconciler.Retry("DownstreamUnreachable", errors.New("connection refused")))),
			wantKind: reconciler.KindTransient, wantReady: cond{metav1.ConditionFalse, "DownstreamUnreachable"}, wantRec: cond{metav1.ConditionTrue, "DownstreamUnreachable"},
			wantMessage: "making the thing failed, retrying: pushing: connection refused", kstatus: status.InProgressStatus,
		},
		{name: "conflict", rules: ready, out: reconciler.Failure(conflictErr()), wantKind: reconciler.KindRaced, kstatus: status.CurrentStatus},
		{name: "not in the cache yet", rules: ready, out: reconciler.Failure(alreadyExistsErr()), wantKind: reconciler.KindRaced, kstatus: status.CurrentStatus},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.out.Kind(); got != tc.wantKind {
				t.Fatalf("kind %v, want %v", got, tc.wantKind)
			}
			obj := &fleet.ClusterGroup{
				TypeMeta:   metav1.TypeMeta{APIVersion: fleet.GroupVersion.String(), Kind: "ClusterGroup"},
				ObjectMeta: metav1.ObjectMeta{Name: "g", Generation: 4},
			}
			obj.Status.ObservedGeneration = 4
			tc.rules.Set(obj, tc.out, t0)
			check := func(typ string, want cond) {
				t.Helper()
				c := meta.FindStatusCondition(obj.Status.Conditions, typ)
				if want.status == "" {
					if c != nil {
						t.Errorf("%s: %+v, want none", typ, c)
					}
					return
				}
				if c == nil || c.Status != want.status || c.Reason != want.reason || c.Message != tc.wantMessage ||
					c.ObservedGeneration != 4 || !c.LastTransitionTime.Time.Equal(t0) {
					t.Errorf("%s: %+v, want %s/%s %q at %s", typ, c, want.status, want.reason, tc.wantMessage, t0)
				}
			}
			check(tc.rules.Ready, tc.wantReady)
			check(fleet.ReconcilingCondition, tc.wantRec)
			check(fleet.StalledCondition, tc.wantSta)

			// flux reads the same.
			if got, want := fluxconditions.IsStalled(obj), tc.wantSta.status == metav1.ConditionTrue; got != want {
				t.Errorf("flux IsStalled = %v", got)
			}
			if got, want := fluxconditions.IsReconciling(obj), tc.wantRec.status == metav1.ConditionTrue; got != want {
				t.Errorf("flux IsReconciling = %v", got)
			}
			// kstatus (what kubectl wait, flux and the agent's health checks
			// use) reads what the table says.
			u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
			if err != nil {
				t.Fatal(err)
			}
			res, err := status.Compute(&unstructured.Unstructured{Object: u})
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != tc.kstatus {
				t.Errorf("kstatus %s (%s), want %s", res.Status, res.Message, tc.kstatus)
			}
		})
	}
}

// A condition that keeps its status keeps its lastTransitionTime, whatever
// its reason and message do; one that changes status is stamped anew.
func TestConditions_TransitionTimeMovesOnlyWithTheStatus(t *testing.T) {
	obj := &fleet.ClusterRegistrationToken{}
	ready.Set(obj, reconciler.Failure(reconciler.Wait("A", 0, "a")), t0)
	ready.Set(obj, reconciler.Failure(reconciler.Wait("B", 0, "b")), t0.Add(time.Minute))
	c := meta.FindStatusCondition(obj.Status.Conditions, fleet.ReadyCondition)
	if c.Reason != "B" || !c.LastTransitionTime.Time.Equal(t0) {
		t.Errorf("same status, new reason: %+v", c)
	}
	ready.Set(obj, reconciler.Success(fleet.SucceededReason, "ok"), t0.Add(2*time.Minute))
	c = meta.FindStatusCondition(obj.Status.Conditions, fleet.ReadyCondition)
	if c.Status != metav1.ConditionTrue || !c.LastTransitionTime.Time.Equal(t0.Add(2*time.Minute)) {
		t.Errorf("new status: %+v", c)
	}
}

// Set leaves conditions it does not own alone.
func TestConditions_LeavesOtherConditions(t *testing.T) {
	obj := &fleet.Cluster{}
	meta.SetStatusCondition(&obj.Status.Conditions, metav1.Condition{Type: fleet.ImportedCondition, Status: metav1.ConditionTrue, Reason: "x"})
	ready.Set(obj, reconciler.Failure(reconciler.Stall("Bad", "bad")), t0)
	if !meta.IsStatusConditionTrue(obj.Status.Conditions, fleet.ImportedCondition) || len(obj.Status.Conditions) != 3 {
		t.Errorf("conditions %+v", obj.Status.Conditions)
	}
	if got := ready.Owned(); !slices.Equal(got, []string{fleet.ReadyCondition, fleet.ReconcilingCondition, fleet.StalledCondition}) {
		t.Errorf("owned %v", got)
	}
}

func TestResult(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name     string
		out      reconciler.Outcome
		schedule time.Duration
		want     ctrl.Result
		wantErr  error
	}{
		{"succeeded", reconciler.Success("S", ""), 0, ctrl.Result{}, nil},
		{"succeeded with a schedule", reconciler.Success("S", ""), time.Hour, ctrl.Result{RequeueAfter: time.Hour}, nil},
		{"waiting", reconciler.Failure(reconciler.Wait("W", time.Minute, "")), time.Hour, ctrl.Result{RequeueAfter: time.Minute}, nil},
		{"waiting, schedule first", reconciler.Failure(reconciler.Wait("W", time.Minute, "")), time.Second, ctrl.Result{RequeueAfter: time.Second}, nil},
		{"waiting on a watch", reconciler.Failure(reconciler.Wait("W", 0, "")), 0, ctrl.Result{}, nil},
		{"waiting on a watch, with a schedule", reconciler.Failure(reconciler.Wait("W", 0, "")), time.Hour, ctrl.Result{RequeueAfter: time.Hour}, nil},
		{"stalled: no retry storm", reconciler.Failure(reconciler.Stall("S", "")), 0, ctrl.Result{}, nil},
		{"stalled keeps the schedule", reconciler.Failure(reconciler.Stall("S", "")), time.Hour, ctrl.Result{RequeueAfter: time.Hour}, nil},
		{"transient", reconciler.Failure(boom), time.Hour, ctrl.Result{}, boom},
		{"transient with a reason", reconciler.Failure(reconciler.Retry("R", boom)), time.Hour, ctrl.Result{}, boom},
		{"object not in the cache yet", reconciler.Failure(alreadyExistsErr()), time.Hour, ctrl.Result{RequeueAfter: reconciler.CacheLagRetry}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.out.Result(tc.schedule)
			if got != tc.want || !errors.Is(err, tc.wantErr) {
				t.Errorf("Result(%s) = %+v, %v; want %+v, %v", tc.schedule, got, err, tc.want, tc.wantErr)
			}
		})
	}
	if _, err := reconciler.Failure(conflictErr()).Result(0); !apierrors.IsConflict(err) {
		t.Errorf("a conflict is returned to be retried at once: %v", err)
	}
}

func TestEarliest(t *testing.T) {
	for _, tc := range []struct{ a, b, want time.Duration }{
		{0, 0, 0}, {time.Second, 0, time.Second}, {0, time.Second, time.Second},
		{time.Second, time.Minute, time.Second}, {time.Minute, time.Second, time.Second}, {-time.Second, 0, 0},
	} {
		if got := reconciler.Earliest(tc.a, tc.b); got != tc.want {
			t.Errorf("Earliest(%s, %s) = %s, want %s", tc.a, tc.b, got, tc.want)
		}
	}
}

type phaseState struct{ ran []string }

func TestPhases_RunInOrderSkipAndStopAtTheFirstError(t *testing.T) {
	run := func(name string) reconciler.Phase[*phaseState] {
		return reconciler.Phase[*phaseState]{Name: name, Run: func(_ context.Context, s *phaseState) error {
			s.ran = append(s.ran, name)
			return nil
		}}
	}
	skipped := run("skipped")
	skipped.Skip = func(*phaseState) bool { return true }
	phases := reconciler.Phases[*phaseState]{run("a"), skipped, run("b"), run("c")}
	if got := phases.Names(); !slices.Equal(got, []string{"a", "skipped", "b", "c"}) {
		t.Errorf("names %v", got)
	}

	s := &phaseState{}
	if err := phases.Run(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.ran, []string{"a", "b", "c"}) {
		t.Errorf("ran %v, want a, b, c", s.ran)
	}

	// The first error stops the pass, and is returned as it is (a Waiting
	// stays a Waiting for the caller's Outcome).
	wait := reconciler.Wait("Blocked", time.Second, "x waits")
	failing := reconciler.Phases[*phaseState]{run("a"), {Name: "x", Run: func(context.Context, *phaseState) error { return wait }}, run("c")}
	s = &phaseState{}
	err := failing.Run(t.Context(), s)
	var w *reconciler.Waiting
	if !errors.As(err, &w) || w.Reason != "Blocked" || !slices.Equal(s.ran, []string{"a"}) {
		t.Errorf("ran %v, err %v; want a, then the Waiting of x", s.ran, err)
	}
}

// TestStatusPatchFailed: a status write that conflicted runs the pass again
// in moments, whatever the controller's failure backoff; any other failure
// of the write is an error (with the pass's own), for the backoff.
func TestStatusPatchFailed(t *testing.T) {
	conflict := apierrors.NewConflict(schema.GroupResource{Group: "fleet.cattle.io", Resource: "clusters"}, "c", errors.New("the object has been modified"))
	res, err := reconciler.StatusPatchFailed(context.Background(), conflict, errors.New("the pass failed too"))
	if err != nil || res.RequeueAfter != reconciler.StatusConflictRetry || res.RequeueAfter > 100*time.Millisecond {
		t.Errorf("a conflict: %+v, %v; want a retry after %s and no error", res, err, reconciler.StatusConflictRetry)
	}
	down := errors.New("connection refused")
	pass := errors.New("applying: refused")
	res, err = reconciler.StatusPatchFailed(context.Background(), down, pass)
	if res != (ctrl.Result{}) || !errors.Is(err, down) || !errors.Is(err, pass) {
		t.Errorf("another failure: %+v, %v; want both errors for the backoff", res, err)
	}
}
