package reconciler_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/gitops-fleet/fleet/internal/reconciler"
)

// TestRunManager_StopsWhileCachesCannotSync: a manager whose identity may
// not list what it watches never gets its caches synced; stopped then, it
// still returns (with an error saying so) within the bound, where
// controller-runtime's own Start would keep the process alive.
func TestRunManager_StopsWhileCachesCannotSync(t *testing.T) {
	ns := newNamespace(t)
	if err := env.Upstream.Client.Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "no-rbac"}}); err != nil {
		t.Fatal(err)
	}
	bearer, err := env.Upstream.ServiceAccountToken(t.Context(), ns, "no-rbac", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(env.Upstream.ConfigForToken(bearer), ctrl.Options{Metrics: server.Options{BindAddress: "0"}})
	if err != nil {
		t.Fatal(err)
	}
	// An informer known before the start, as a controller's watches or an
	// indexer make one: the manager waits for it to sync before it starts
	// anything else.
	if _, err := mgr.GetCache().GetInformer(t.Context(), &corev1.ConfigMap{}, cache.BlockUntilSynced(false)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	result := make(chan error, 1)
	go func() { result <- reconciler.RunManager(ctx, mgr, 3*time.Second) }()
	// Let the manager get into its start (the informer's list is refused).
	time.Sleep(time.Second)
	cancel()
	select {
	case err := <-result:
		if err != nil && !strings.Contains(err.Error(), "did not stop") {
			t.Errorf("RunManager: %v", err)
		}
		t.Logf("RunManager returned: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("RunManager did not return within 30s of the stop")
	}
}
