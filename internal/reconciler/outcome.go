// Package reconciler is the runtime layer the controllers share: what one
// pass of a reconciler comes to (an Outcome), the kstatus condition rules
// that outcome sets (Conditions), the status written once at the end of a
// pass (StatusPatcher), objects made and kept by server-side apply
// (Objects.Ensure), and named phases run in order (Phases).
//
// A pass ends in one of four ways:
//
//   - it succeeded: Ready=True with the reason and message the controller
//     gives;
//   - it waits on something outside the object (another object, a person, a
//     deletion): a *Waiting error with reason, message and when to look
//     again;
//   - the user must act on the object itself: a *Stalled error, not retried
//     until the object (or something watched) changes;
//   - anything else is a transient error, retried with backoff (a *Retrying
//     names its reason).
package reconciler

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
)

// FieldManager owns every write a controller makes itself (status,
// finalizers, owner references, the objects it creates with a plain
// create). Objects kept by server-side apply are owned by apply.FieldManager
// instead, the field manager of everything fleet applies. Never rename
// either: existing objects are owned by them.
const FieldManager = "fleet-controller"

const (
	// CacheLagRetry is how soon a pass is tried again when the cache did
	// not show yet an object that turned out to exist (or a write the
	// controller made itself).
	CacheLagRetry = time.Second
	// ConflictRetry is how often an object is looked at again while an
	// object it needs is taken by someone else and nothing watched tells
	// the controller when that changes.
	ConflictRetry = 30 * time.Second
	// StatusConflictRetry is how soon a pass whose status write conflicted
	// runs again: the other write (another writer's, or the pass's own
	// last one the cache did not show yet) is in the cache within moments,
	// while a controller's failure backoff may start at a second.
	StatusConflictRetry = 50 * time.Millisecond
)

// StatusPatchFailed is the result of a pass whose status patch failed with
// err (outErr: how the pass itself ended). A conflict is retried after
// StatusConflictRetry, without the failure backoff (the pass is done again
// on the newer object); any other failure is returned, for the backoff.
func StatusPatchFailed(ctx context.Context, err, outErr error) (ctrl.Result, error) {
	if apierrors.IsConflict(err) {
		ctrl.LoggerFrom(ctx).V(1).Info("status written meanwhile; the pass runs again", "error", err.Error())
		return ctrl.Result{RequeueAfter: StatusConflictRetry}, nil
	}
	return ctrl.Result{}, errors.Join(outErr, err)
}

// Stalled means the user must act: the pass cannot succeed until the object
// (or something the controller watches) changes. It is not retried on its
// own.
type Stalled struct {
	Reason  string
	Message string
}

func (e *Stalled) Error() string { return e.Message }

// Stall returns a *Stalled error.
func Stall(reason, format string, args ...any) error {
	return &Stalled{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// Waiting means the pass cannot go on until something outside the object
// changes.
type Waiting struct {
	Reason  string
	Message string
	// RequeueAfter is when to look again; zero means a watch brings the
	// object back.
	RequeueAfter time.Duration
	// Event is the type of the event to record when the wait begins: ""
	// for none, "Normal" when a person may act, "Warning" when a person
	// has to.
	Event string
}

func (e *Waiting) Error() string { return e.Message }

// Wait returns a *Waiting error.
func Wait(reason string, after time.Duration, format string, args ...any) *Waiting {
	return &Waiting{Reason: reason, Message: fmt.Sprintf(format, args...), RequeueAfter: after}
}

// WithEvent sets the type of the event recorded when the wait begins.
func (e *Waiting) WithEvent(eventType string) *Waiting {
	e.Event = eventType
	return e
}

// Retrying is a transient error with a reason of its own: retried with
// backoff like any error, and reported under that reason instead of
// Progressing (a downstream cluster that does not answer, say).
type Retrying struct {
	Reason string
	Err    error
}

func (e *Retrying) Error() string { return e.Err.Error() }
func (e *Retrying) Unwrap() error { return e.Err }

// Retry returns a *Retrying error.
func Retry(reason string, err error) error { return &Retrying{Reason: reason, Err: err} }

// Kind is one of the ways a pass can end.
type Kind int

const (
	// KindSucceeded: the object is as it should be.
	KindSucceeded Kind = iota
	// KindWaiting: the pass waits on something outside the object.
	KindWaiting
	// KindStalled: the user must act.
	KindStalled
	// KindTransient: an error retried with backoff.
	KindTransient
	// KindRaced: a conflict with another writer, or an object the cache
	// did not show yet. Retried soon; the conditions are left as they are.
	KindRaced
)

// Outcome is what one pass came to.
type Outcome struct {
	// Err is nil when the pass succeeded; a *Stalled or *Waiting (possibly
	// wrapped) when it cannot go on; any other error is transient.
	Err error
	// Reason and Message of the Ready condition when the pass succeeded.
	Reason  string
	Message string
}

// Success is the outcome of a pass that succeeded.
func Success(reason, format string, args ...any) Outcome {
	return Outcome{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// Failure is the outcome of a pass that ended with err.
func Failure(err error) Outcome { return Outcome{Err: err} }

// Kind classifies the outcome.
func (o Outcome) Kind() Kind {
	var s *Stalled
	var w *Waiting
	switch {
	case o.Err == nil:
		return KindSucceeded
	case errors.As(o.Err, &s):
		return KindStalled
	case errors.As(o.Err, &w):
		return KindWaiting
	case apierrors.IsConflict(o.Err) || apierrors.IsAlreadyExists(o.Err):
		return KindRaced
	default:
		return KindTransient
	}
}

// Waiting returns the wait of a waiting outcome, nil otherwise.
func (o Outcome) Waiting() *Waiting {
	var w *Waiting
	if errors.As(o.Err, &w) {
		return w
	}
	return nil
}

// Stalled returns the cause of a stalled outcome, nil otherwise.
func (o Outcome) Stalled() *Stalled {
	var s *Stalled
	if errors.As(o.Err, &s) {
		return s
	}
	return nil
}
