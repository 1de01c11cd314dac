// Package scheme is the runtime.Scheme every client of the project uses:
// the core Kubernetes kinds, the fleet.cattle.io kinds and CRDs.
package scheme

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

// Scheme knows the core Kubernetes kinds, the fleet.cattle.io kinds and CRDs.
var Scheme = runtime.NewScheme()

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(Scheme))
	utilruntime.Must(fleet.AddToScheme(Scheme))
	utilruntime.Must(apiextensionsv1.AddToScheme(Scheme))
}
