package cluster

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/config"
)

// importMemo remembers, per Cluster, the inputs of its last import check
// that found nothing to deploy. Most reconciles are caused by heartbeats
// (status only); with the same inputs they need not read the kubeconfig
// Secret from the API server again.
//
// The memo is only an optimisation, safe to lose (a restart, another
// replica taking the Cluster over): it decides nothing by itself. The
// decision to deploy is made from upstream state alone (the Cluster's spec
// and status, the kubeconfig Secret, the configuration, the agent chart),
// and the memo only says that this exact set of inputs, every one of them
// in the key, was checked already and needed no deploy. A Cluster missing
// from it is checked in full: one read of its kubeconfig Secret.
type importMemo = memo[memoKey]

// memoKey is everything the import decision depends on.
type memoKey struct {
	uid          types.UID
	generation   int64
	config       *config.Config // the store hands out a new pointer on every change
	secret       string         // UID and resourceVersion of the kubeconfig Secret
	chart        string         // digest of the agent chart the renderer renders
	valuesHash   string         // status as last written
	deployedGen  int64
	serverHash   string
	configChange bool
}

// memo holds one value per Cluster; safe for concurrent reconciles.
type memo[V comparable] struct {
	mu sync.Mutex
	m  map[types.NamespacedName]V
}

// seen reports whether v is the value remembered for k.
func (m *memo[V]) seen(k types.NamespacedName, v V) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	old, ok := m.m[k]
	return ok && old == v
}

func (m *memo[V]) remember(k types.NamespacedName, v V) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil {
		m.m = map[types.NamespacedName]V{}
	}
	m.m[k] = v
}

func (m *memo[V]) forget(k types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.m, k)
}

// importMemoKey reads the kubeconfig Secret's metadata from the informer
// cache; nil when it cannot (then the import reads the Secret).
func (r *Reconciler) importMemoKey(ctx context.Context, cluster *fleet.Cluster, cfg *config.Config) *memoKey {
	if r.Cache == nil || cluster.Status.AgentDeployedGeneration == nil {
		return nil
	}
	ns := cluster.Spec.KubeConfigSecretNamespace
	if ns == "" {
		ns = cluster.Namespace
	}
	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	if err := r.Cache.Get(ctx, client.ObjectKey{Namespace: ns, Name: cluster.Spec.KubeConfigSecret}, meta); err != nil {
		return nil
	}
	st := &cluster.Status
	return &memoKey{
		uid:          cluster.UID,
		generation:   cluster.Generation,
		config:       cfg,
		secret:       string(meta.UID) + "/" + meta.ResourceVersion,
		chart:        r.Renderer.ChartDigest(),
		valuesHash:   st.AgentValuesHash,
		deployedGen:  *st.AgentDeployedGeneration,
		serverHash:   st.KubeConfigServerHash,
		configChange: st.AgentConfigChanged,
	}
}

// deployMemo remembers, per Cluster, the deploy this controller made last.
// The deploy is recorded in the Cluster's status at the end of the pass; a
// status write that fails (a conflict with another writer of the status,
// frequent on a loaded API server) makes the pass run again, which without
// it would push the agent a second time and say AgentDeployed twice. Like
// importMemo it is safe to lose: a lost entry costs one idempotent push.
type deployMemo = memo[deployRecord]

// deployRecord is what a deploy applied: for that Cluster (UID), at that
// redeployAgentGeneration, those values and that API server.
type deployRecord struct {
	uid         types.UID
	redeployGen int64
	valuesHash  string
	serverHash  string
}

func deployRecordOf(cluster *fleet.Cluster, valuesHash, serverHash string) deployRecord {
	return deployRecord{uid: cluster.UID, redeployGen: cluster.Spec.RedeployAgentGeneration, valuesHash: valuesHash, serverHash: serverHash}
}
