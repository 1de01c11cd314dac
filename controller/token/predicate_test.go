package token

import (
	"testing"

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
