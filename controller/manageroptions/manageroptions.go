// Package manageroptions is how the fleet controller's controller-runtime
// manager reads the API: its scheme and what it caches. controller.New
// builds its manager from it, and so do tests that assemble a manager of
// their own (dev/testenv), so they read the API as the controller does.
package manageroptions

import (
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gitops-fleet/fleet/internal/scheme"
)

// New returns the scheme, client and cache options of the controller whose
// system namespace (its ConfigMap, its leader election Lease) is
// systemNamespace. The caller adds the process's own options (metrics,
// probes, leader election).
func New(systemNamespace string) ctrl.Options {
	return ctrl.Options{
		Scheme: scheme.Scheme,
		Client: client.Options{Cache: &client.CacheOptions{
			// Secrets are read on demand, never cached: the upstream may
			// hold many, and most are none of our business.
			DisableFor: []client.Object{&corev1.Secret{}},
		}},
		Cache: cache.Options{
			DefaultTransform: cache.TransformStripManagedFields(),
			// The controller's own ConfigMap is the only one it reads (and
			// the only namespace where its Role lets it).
			ByObject: map[client.Object]cache.ByObject{
				&corev1.ConfigMap{}: {Namespaces: map[string]cache.Config{systemNamespace: {}}},
			},
		},
	}
}
