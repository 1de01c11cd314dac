package cluster_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller/clusterns"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/names"
	"github.com/gitops-fleet/fleet/internal/reconciler"
)

// TestCluster_NamespaceBeingDeletedIsWaitedForThenMadeAgain: a per-cluster
// namespace that is being deleted (even one made for this very Cluster) is
// not used: the Cluster waits, looks again on its own (namespaces are not
// watched) and makes the namespace again once the old one is gone. The
// registration reconciler follows the same rule (clusterns.Ensure).
func TestCluster_NamespaceBeingDeletedIsWaitedForThenMadeAgain(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-nsdel-")
	old := names.NewClusterNamespace(ws, "c1")
	if err := up.Create(t.Context(), old); err != nil {
		t.Fatal(err)
	}
	// No namespace controller runs here: the namespace stays Terminating
	// (its spec.finalizers) until the test finalizes it.
	if err := up.Delete(t.Context(), old); err != nil {
		t.Fatal(err)
	}
	if err := up.Get(t.Context(), client.ObjectKeyFromObject(old), old); err != nil || old.DeletionTimestamp.IsZero() {
		t.Fatalf("the namespace is not being deleted: %v, %+v", err, old.ObjectMeta)
	}

	// The shared rule, called as both reconcilers call it.
	err := clusterns.Ensure(t.Context(), up, nil, names.NewClusterNamespace(ws, "c1"))
	var w *reconciler.Waiting
	if !errors.As(err, &w) || w.Reason != fleet.WaitingReason || w.RequeueAfter != clusterns.DeletingRetry {
		t.Fatalf("Ensure on a namespace being deleted: %v, want a wait of %s", err, clusterns.DeletingRetry)
	}

	c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "c1"}, Spec: fleet.ClusterSpec{ClientID: "c1"}}
	if err := up.Create(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	startProcess(t, embeddedRenderer(t))
	testenv.Eventually(t, 60*time.Second, "the Cluster waiting for its namespace to go", func() error {
		got := getCluster(t, c)
		ready := meta.FindStatusCondition(got.Status.Conditions, fleet.ReadyCondition)
		rec := meta.FindStatusCondition(got.Status.Conditions, fleet.ReconcilingCondition)
		if ready == nil || ready.Reason != fleet.WaitingReason || !strings.Contains(ready.Message, "being deleted") ||
			rec == nil || rec.Status != metav1.ConditionTrue || got.Status.Namespace != "" {
			return fmt.Errorf("status: %+v", got.Status)
		}
		if st := meta.FindStatusCondition(got.Status.Conditions, fleet.StalledCondition); st != nil {
			return fmt.Errorf("stalled: %+v", st)
		}
		return nil
	})

	// The deletion ends: the namespace is made again, for this Cluster.
	old.Spec.Finalizers = nil
	if _, err := env.Upstream.Clientset.CoreV1().Namespaces().Finalize(t.Context(), old, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "the namespace made again", func() error {
		ns := &corev1.Namespace{}
		err := up.Get(t.Context(), client.ObjectKeyFromObject(old), ns)
		switch {
		case err != nil:
			return err
		case ns.UID == old.UID || !ns.DeletionTimestamp.IsZero() || !names.NamespaceIsFor(ns, ws, "c1"):
			return fmt.Errorf("namespace %s: uid %s (old %s), deletion %v, annotations %v", ns.Name, ns.UID, old.UID, ns.DeletionTimestamp, ns.Annotations)
		}
		if got := getCluster(t, c); got.Status.Namespace != ns.Name {
			return fmt.Errorf("status.namespace %q", got.Status.Namespace)
		}
		return nil
	})
	forget(t, c)
}
