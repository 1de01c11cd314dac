package scheme

import (
	"net/http"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

// knownKinds are the kinds an agent reads and writes with its own clients,
// upstream and in its cluster, with whether they are namespaced.
var knownKinds = map[schema.GroupVersionKind]bool{
	corev1.SchemeGroupVersion.WithKind("Secret"):            true,
	corev1.SchemeGroupVersion.WithKind("ConfigMap"):         true,
	corev1.SchemeGroupVersion.WithKind("ServiceAccount"):    true,
	corev1.SchemeGroupVersion.WithKind("Event"):             true,
	corev1.SchemeGroupVersion.WithKind("Pod"):               true,
	corev1.SchemeGroupVersion.WithKind("Namespace"):         false,
	corev1.SchemeGroupVersion.WithKind("Node"):              false,
	coordinationv1.SchemeGroupVersion.WithKind("Lease"):     true,
	fleet.GroupVersion.WithKind("Cluster"):                  true,
	fleet.GroupVersion.WithKind("ClusterRegistration"):      true,
	fleet.GroupVersion.WithKind("ClusterRegistrationToken"): true,
	fleet.GroupVersion.WithKind("ClusterGroup"):             true,
	fleet.GroupVersion.WithKind("Bundle"):                   true,
	fleet.GroupVersion.WithKind("BundleDeployment"):         true,
	fleet.GroupVersion.WithKind("AgentRollout"):             false,
}

// KnownKindsMapper maps the kinds agents use without asking the API server,
// and any other kind through lazy discovery. Without it every new client
// reads the server's discovery documents before its first request: for
// thousands of agents (re)connecting at once that is the largest read the
// upstream serves, and on a server with many CRDs a large one.
func KnownKindsMapper(cfg *rest.Config, httpClient *http.Client) (meta.RESTMapper, error) {
	static := meta.NewDefaultRESTMapper(nil)
	for gvk, namespaced := range knownKinds {
		scope := meta.RESTScopeRoot
		if namespaced {
			scope = meta.RESTScopeNamespace
		}
		static.Add(gvk, scope)
	}
	dynamic, err := apiutil.NewDynamicRESTMapper(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	return meta.FirstHitRESTMapper{MultiRESTMapper: meta.MultiRESTMapper{static, dynamic}}, nil
}
