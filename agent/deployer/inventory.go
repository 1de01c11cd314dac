package deployer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/registration"
)

const (
	// InventoryPrefix starts the name of every inventory ConfigMap.
	InventoryPrefix = "fleet-inventory-"
	// InventoryLabel marks inventory ConfigMaps, so a restarted agent finds
	// them all.
	InventoryLabel = registration.InventoryLabel
	// InventoryBundleDeploymentAnnotation holds the full BundleDeployment
	// name (the ConfigMap name may be shortened).
	InventoryBundleDeploymentAnnotation = "fleet.cattle.io/bundle-deployment"
	// InventoryKey is the ConfigMap key holding the inventory JSON.
	InventoryKey = "inventory"

	// fieldManager owns every write the deployer makes itself: the
	// inventories downstream and the BundleDeployment status upstream.
	// Applied objects are owned by apply.FieldManager.
	fieldManager = "fleet-agent"
)

// objRef names one applied object.
type objRef struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name"`
}

func refOf(o *unstructured.Unstructured) objRef {
	return objRef{APIVersion: o.GetAPIVersion(), Kind: o.GetKind(), Namespace: o.GetNamespace(), Name: o.GetName()}
}

// key identifies the object independently of its API version, so a
// version change of a kind is not a prune.
func (r objRef) key() string {
	gv, _ := schema.ParseGroupVersion(r.APIVersion)
	return gv.Group + "/" + r.Kind + "/" + r.Namespace + "/" + r.Name
}

func (r objRef) String() string {
	if r.Namespace == "" {
		return r.Kind + " " + r.Name
	}
	return r.Kind + " " + r.Namespace + "/" + r.Name
}

func (r objRef) object() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(r.APIVersion)
	u.SetKind(r.Kind)
	u.SetNamespace(r.Namespace)
	u.SetName(r.Name)
	return u
}

func (r objRef) resource() fleet.BundleDeploymentResource {
	return fleet.BundleDeploymentResource{APIVersion: r.APIVersion, Kind: r.Kind, Namespace: r.Namespace, Name: r.Name}
}

// inventory is what the deployer last applied for one BundleDeployment.
type inventory struct {
	// BundleDeployment and ClusterNamespace name the owner; the applied
	// objects carry them as ssa owner labels.
	BundleDeployment string `json:"bundleDeployment"`
	ClusterNamespace string `json:"clusterNamespace"`
	// KeepResources is the BundleDeployment's keepResources at the last
	// apply: a deleted BundleDeployment cannot be asked any more.
	KeepResources bool `json:"keepResources,omitempty"`
	// ServiceAccount is the BundleDeployment's serviceAccount at the last
	// apply ("" for the agent itself): a deleted BundleDeployment is pruned
	// as the identity that applied it.
	ServiceAccount string   `json:"serviceAccount,omitempty"`
	Resources      []objRef `json:"resources"`
	// Namespace, DeleteNamespace and DeleteCRDResources are the target
	// namespace and the BundleDeployment's options of those names at the
	// last apply, for its deletion (namespaces.go).
	Namespace          string `json:"namespace,omitempty"`
	DeleteNamespace    bool   `json:"deleteNamespace,omitempty"`
	DeleteCRDResources bool   `json:"deleteCRDResources,omitempty"`
	// HooksRun is the last hook step a deployment completed,
	// "<deploymentID>/<forceSyncGeneration>|pre" or "...|post", so an
	// apply retried for the same deployment (its status write failed, the
	// agent restarted) does not run its hooks again, as Helm runs them once
	// per release (hooks.go). put keeps it when the new inventory has none.
	HooksRun string `json:"hooksRun,omitempty"`
}

func (inv *inventory) equal(o *inventory) bool {
	if inv == nil || o == nil {
		return inv == o
	}
	return inv.BundleDeployment == o.BundleDeployment && inv.ClusterNamespace == o.ClusterNamespace &&
		inv.KeepResources == o.KeepResources && inv.ServiceAccount == o.ServiceAccount && slices.Equal(inv.Resources, o.Resources) &&
		inv.Namespace == o.Namespace && inv.DeleteNamespace == o.DeleteNamespace && inv.DeleteCRDResources == o.DeleteCRDResources &&
		inv.HooksRun == o.HooksRun
}

// contains reports whether every ref is listed.
func (inv *inventory) contains(refs []objRef) bool {
	if inv == nil {
		return len(refs) == 0
	}
	have := make(map[string]bool, len(inv.Resources))
	for _, r := range inv.Resources {
		have[r.key()] = true
	}
	for _, r := range refs {
		if !have[r.key()] {
			return false
		}
	}
	return true
}

// without returns the refs of inv that are not in keep.
func (inv *inventory) without(keep []objRef) []objRef {
	if inv == nil {
		return nil
	}
	k := make(map[string]bool, len(keep))
	for _, r := range keep {
		k[r.key()] = true
	}
	var out []objRef
	for _, r := range inv.Resources {
		if !k[r.key()] {
			out = append(out, r)
		}
	}
	return out
}

// union returns refs followed by those of inv not in refs.
func union(refs []objRef, inv *inventory) []objRef {
	return append(slices.Clone(refs), inv.without(refs)...)
}

// InventoryName is the inventory ConfigMap of a BundleDeployment:
// "fleet-inventory-<name>", shortened with a hash suffix when longer than
// a ConfigMap name may be.
func InventoryName(bundleDeployment string) string {
	const maxLen = 253
	n := InventoryPrefix + bundleDeployment
	if len(n) <= maxLen {
		return n
	}
	sum := sha256.Sum256([]byte(bundleDeployment))
	h := hex.EncodeToString(sum[:])[:10]
	n = strings.TrimRight(n[:maxLen-len(h)-1], "-.")
	return n + "-" + h
}

// inventoryStore keeps inventories in memory and in ConfigMaps downstream.
type inventoryStore struct {
	c         client.Client
	namespace string

	mu  sync.Mutex
	mem map[string]*inventory
}

func newInventoryStore(c client.Client, namespace string) *inventoryStore {
	return &inventoryStore{c: c, namespace: namespace, mem: map[string]*inventory{}}
}

// get returns the inventory of a BundleDeployment, nil if there is none.
func (s *inventoryStore) get(ctx context.Context, name string) (*inventory, error) {
	s.mu.Lock()
	inv, ok := s.mem[name]
	s.mu.Unlock()
	if ok {
		return inv, nil
	}
	cm := &corev1.ConfigMap{}
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: s.namespace, Name: InventoryName(name)}, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading inventory configmap %s/%s: %w", s.namespace, InventoryName(name), err)
	}
	inv = &inventory{}
	if err := json.Unmarshal([]byte(cm.Data[InventoryKey]), inv); err != nil {
		return nil, fmt.Errorf("inventory configmap %s/%s is not valid: %w", s.namespace, cm.Name, err)
	}
	s.mu.Lock()
	s.mem[name] = inv
	s.mu.Unlock()
	return inv, nil
}

// put stores an inventory; it writes only when it changed.
func (s *inventoryStore) put(ctx context.Context, inv *inventory) error {
	old, err := s.get(ctx, inv.BundleDeployment)
	if err != nil {
		return err
	}
	if inv.HooksRun == "" && old != nil && old.HooksRun != "" {
		keep := *inv
		keep.HooksRun = old.HooksRun
		inv = &keep
	}
	if old.equal(inv) {
		return nil
	}
	b, err := json.Marshal(inv)
	if err != nil {
		return err
	}
	name := InventoryName(inv.BundleDeployment)
	cm := &corev1.ConfigMap{}
	err = s.c.Get(ctx, client.ObjectKey{Namespace: s.namespace, Name: name}, cm)
	switch {
	case apierrors.IsNotFound(err):
		cm = &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{
				Namespace:   s.namespace,
				Name:        name,
				Labels:      map[string]string{InventoryLabel: "true"},
				Annotations: map[string]string{InventoryBundleDeploymentAnnotation: inv.BundleDeployment},
			},
			Data: map[string]string{InventoryKey: string(b)},
		}
		err = s.c.Create(ctx, cm, client.FieldOwner(fieldManager))
	case err == nil:
		cm.Data = map[string]string{InventoryKey: string(b)}
		err = s.c.Update(ctx, cm, client.FieldOwner(fieldManager))
	}
	if err != nil {
		return fmt.Errorf("writing inventory configmap %s/%s: %w", s.namespace, name, err)
	}
	s.mu.Lock()
	s.mem[inv.BundleDeployment] = inv
	s.mu.Unlock()
	return nil
}

// remove deletes the inventory of a BundleDeployment.
func (s *inventoryStore) remove(ctx context.Context, name string) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.namespace, Name: InventoryName(name)}}
	if err := s.c.Delete(ctx, cm); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting inventory configmap %s/%s: %w", s.namespace, cm.Name, err)
	}
	s.mu.Lock()
	delete(s.mem, name)
	s.mu.Unlock()
	return nil
}

// list returns the BundleDeployment names of all stored inventories.
func (s *inventoryStore) list(ctx context.Context) ([]string, error) {
	l := &corev1.ConfigMapList{}
	if err := s.c.List(ctx, l, client.InNamespace(s.namespace), client.MatchingLabels{InventoryLabel: "true"}); err != nil {
		return nil, err
	}
	var names []string
	for _, cm := range l.Items {
		if n := cm.Annotations[InventoryBundleDeploymentAnnotation]; n != "" {
			names = append(names, n)
		}
	}
	return names, nil
}
