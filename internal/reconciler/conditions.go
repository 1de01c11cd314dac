package reconciler

import (
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

// ObjectWithConditions is an object whose status has conditions. Every
// fleet kind with conditions implements it (api/v1alpha1); it is the same
// contract as fluxcd/pkg/runtime/conditions.Setter, so flux's condition
// helpers accept these objects too.
type ObjectWithConditions interface {
	client.Object
	GetConditions() []metav1.Condition
	SetConditions([]metav1.Condition)
}

// Conditions are the kstatus rules of one kind: the condition that says
// whether the object is done, and how a transient failure is described.
// Every controller sets its conditions from an Outcome through Set, so
// Ready, Reconciling and Stalled mean the same on every kind:
//
//	outcome     Ready (c.Ready)                 Reconciling      Stalled
//	succeeded   True, the outcome's reason      removed          removed
//	waiting     False, the wait's reason        True, same       removed
//	stalled     False, the stall's reason       removed          True, same
//	transient   False, Progressing (or the      True, same       removed
//	            *Retrying's reason), the error
//	raced       unchanged                       unchanged        unchanged
type Conditions struct {
	// Ready is the type of the condition that says whether the object is
	// done: fleet.ReadyCondition, unless the kind names another (a
	// ClusterRegistration's is Granted).
	Ready string
	// Failing says what a transient error interrupted, as in "granting
	// failed"; the condition message adds ", retrying: <error>".
	Failing string
}

// Owned returns the condition types Set writes.
func (c Conditions) Owned() []string {
	return []string{c.Ready, fleet.ReconcilingCondition, fleet.StalledCondition}
}

// Set sets obj's conditions from the outcome of a pass. A condition that
// changes status is stamped now; one that keeps its status keeps its
// lastTransitionTime (the Kubernetes API convention).
func (c Conditions) Set(obj ObjectWithConditions, o Outcome, now time.Time) {
	conds := obj.GetConditions()
	set := func(t string, status metav1.ConditionStatus, reason, message string) {
		meta.SetStatusCondition(&conds, metav1.Condition{
			Type: t, Status: status, Reason: reason, Message: message,
			ObservedGeneration: obj.GetGeneration(),
			LastTransitionTime: metav1.NewTime(now),
		})
	}
	remove := func(t string) { meta.RemoveStatusCondition(&conds, t) }

	switch o.Kind() {
	case KindRaced:
		// A retry follows at once; what the conditions said still holds.
		return
	case KindSucceeded:
		set(c.Ready, metav1.ConditionTrue, o.Reason, o.Message)
		remove(fleet.ReconcilingCondition)
		remove(fleet.StalledCondition)
	case KindWaiting:
		w := o.Waiting()
		set(c.Ready, metav1.ConditionFalse, w.Reason, w.Message)
		set(fleet.ReconcilingCondition, metav1.ConditionTrue, w.Reason, w.Message)
		remove(fleet.StalledCondition)
	case KindStalled:
		s := o.Stalled()
		set(c.Ready, metav1.ConditionFalse, s.Reason, s.Message)
		remove(fleet.ReconcilingCondition)
		set(fleet.StalledCondition, metav1.ConditionTrue, s.Reason, s.Message)
	case KindTransient:
		reason := fleet.ProgressingReason
		var r *Retrying
		if errors.As(o.Err, &r) {
			reason = r.Reason
		}
		msg := fmt.Sprintf("%s, retrying: %v", c.Failing, o.Err)
		set(c.Ready, metav1.ConditionFalse, reason, msg)
		set(fleet.ReconcilingCondition, metav1.ConditionTrue, reason, msg)
		remove(fleet.StalledCondition)
	}
	obj.SetConditions(conds)
}

// Result is what controller-runtime does after a pass with this outcome.
// schedule is a look the controller needs at a known time whatever the
// outcome (a token's expiry, a credential's pickup deadline); zero means
// none.
//
//	outcome     result
//	succeeded   RequeueAfter schedule
//	waiting     RequeueAfter the earlier of the wait's and schedule
//	stalled     RequeueAfter schedule (the user's change brings it back)
//	transient   the error: retried with backoff
//	raced       a conflict: the error (retried at once, with backoff);
//	            an object that exists though the cache did not show it:
//	            RequeueAfter CacheLagRetry
func (o Outcome) Result(schedule time.Duration) (ctrl.Result, error) {
	switch o.Kind() {
	case KindTransient:
		return ctrl.Result{}, o.Err
	case KindRaced:
		if apierrors.IsAlreadyExists(o.Err) {
			return ctrl.Result{RequeueAfter: CacheLagRetry}, nil
		}
		return ctrl.Result{}, o.Err
	case KindWaiting:
		return ctrl.Result{RequeueAfter: Earliest(o.Waiting().RequeueAfter, schedule)}, nil
	default:
		return ctrl.Result{RequeueAfter: schedule}, nil
	}
}

// Earliest returns the shorter of two requeue delays, zero meaning none.
func Earliest(a, b time.Duration) time.Duration {
	if a <= 0 || (b > 0 && b < a) {
		return max(b, 0)
	}
	return a
}
