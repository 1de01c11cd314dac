package cluster

import "k8s.io/apimachinery/pkg/types"

// FoundNothingToDeploy reports whether r has checked the import of the
// Cluster and found nothing to deploy (its memo holds the Cluster): proof
// that this reconciler saw the Cluster and decided not to push the agent.
func FoundNothingToDeploy(r *Reconciler, key types.NamespacedName) bool {
	r.memo.mu.Lock()
	defer r.memo.mu.Unlock()
	_, ok := r.memo.m[key]
	return ok
}
