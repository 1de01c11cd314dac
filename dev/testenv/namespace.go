package testenv

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Namespace makes a namespace for one test (prefix and a random suffix) in
// the cluster of c and returns its name. Tests never share one. It is not
// deleted: the control planes end with the suite, and deleting it would
// only load a busy machine.
func Namespace(t testing.TB, c client.Client, prefix string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}
	if err := c.Create(t.Context(), ns); err != nil {
		t.Fatalf("creating a namespace %s...: %v", prefix, err)
	}
	return ns.Name
}
