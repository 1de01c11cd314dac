package token

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

// TestTokenChanged: a token's status write (the reconciler's own, or a
// grant recording a Cluster under maxClusters) brings no pass; a change of
// its spec, annotations or labels does.
func TestTokenChanged(t *testing.T) {
	old := &fleet.ClusterRegistrationToken{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ws", Name: "t", Generation: 1, ResourceVersion: "1",
			Labels: map[string]string{"a": "1"}, Annotations: map[string]string{"b": "1"}},
		Spec: fleet.ClusterRegistrationTokenSpec{TTL: &metav1.Duration{Duration: 3600e9}},
	}
	for _, tc := range []struct {
		name   string
		change func(*fleet.ClusterRegistrationToken)
		want   bool
	}{
		{"status: a reserved Cluster", func(n *fleet.ClusterRegistrationToken) { n.Status.RegisteredClusters = []string{"c"} }, false},
		{"status: the values Secret", func(n *fleet.ClusterRegistrationToken) { n.Status.SecretName = "t" }, false},
		{"spec (a new generation)", func(n *fleet.ClusterRegistrationToken) { n.Spec.TTL = nil; n.Generation = 2 }, true},
		{"an annotation", func(n *fleet.ClusterRegistrationToken) { n.Annotations = map[string]string{"b": "2"} }, true},
		{"a label", func(n *fleet.ClusterRegistrationToken) { n.Labels = map[string]string{"a": "2"} }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := old.DeepCopy()
			n.ResourceVersion = "2"
			tc.change(n)
			if got := tokenChanged.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: n}); got != tc.want {
				t.Errorf("a pass: %v, want %v", got, tc.want)
			}
		})
	}
	if !tokenChanged.Create(event.CreateEvent{Object: old}) {
		t.Error("a new token brings no pass")
	}
}

// TestNotOwnFill: the update event of the reconciler's own write of a new
// values Secret's bearer token brings no pass, once; any other update of
// that Secret (someone else's, or a later one) and its deletion do.
func TestNotOwnFill(t *testing.T) {
	r := &Reconciler{}
	secret := func(name, rv string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ws", Name: name, ResourceVersion: rv}}
	}
	update := func(name, rv string) bool {
		return r.notOwnFill(event.UpdateEvent{ObjectOld: secret(name, "1"), ObjectNew: secret(name, rv)})
	}
	r.filled.Store("ws/t", "7")
	if !update("other", "7") {
		t.Error("an update of another Secret with the same resourceVersion brought no pass")
	}
	if !update("t", "6") {
		t.Error("an update of the Secret before the fill brought no pass")
	}
	if update("t", "7") {
		t.Error("the reconciler's own fill brought a pass")
	}
	if !update("t", "7") {
		t.Error("the same resourceVersion seen again brought no pass: the fill is skipped only once")
	}
	if !update("t", "8") {
		t.Error("a later update brought no pass")
	}
	r.filled.Store("ws/t", "9")
	if !r.forgetFill(event.DeleteEvent{Object: secret("t", "9")}) {
		t.Error("the deletion brought no pass")
	}
	if _, ok := r.filled.Load("ws/t"); ok {
		t.Error("a deleted Secret's fill is still kept")
	}
}
