package reconciler

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
)

// Clock returns the current time; nil means time.Now. Reconcilers keep one
// so tests can set the time.
type Clock func() time.Time

// Now returns the current time.
func (c Clock) Now() time.Time {
	if c == nil {
		return time.Now()
	}
	return c()
}

// KindOf names obj's kind as scheme knows it.
func KindOf(scheme *runtime.Scheme, obj runtime.Object) string {
	if gvk, err := apiutil.GVKForObject(obj, scheme); err == nil {
		return gvk.Kind
	}
	return fmt.Sprintf("%T", obj)
}

// Eventf records an event on regarding (related may be nil) when rec is
// set; reconcilers built without a recorder (in tests) record nothing.
func Eventf(rec recorder.EventRecorder, regarding, related runtime.Object, eventType, reason, action, note string, args ...any) {
	if rec != nil {
		rec.Eventf(regarding, related, eventType, reason, action, note, args...)
	}
}
