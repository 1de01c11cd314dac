package tunnel

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/names"
	"github.com/gitops-fleet/fleet/internal/registration"
)

// ErrNotAnAgent is the refusal of an identity that may hold no tunnel, or
// not the one it names. Its message names identities and objects (for the
// log), never a credential; callers answer 403 without it.
var ErrNotAnAgent = errors.New("not the request identity of a granted agent")

const serviceAccountPrefix = "system:serviceaccount:"

// ClusterForIdentity maps an upstream identity to the Cluster whose tunnel
// it may hold, as the key "<workspace>/<name>". Only the request identity
// of a current registration maps: user
// system:serviceaccount:<cluster namespace>:request-<registration>, whose
// ServiceAccount was made for that registration (its labels), whose
// registration is granted and not being deleted and was granted as the
// Cluster (status.clusterName, the same clientID), in that Cluster's
// namespace: names.ClusterNamespace of it, which its status.namespace
// records. A Cluster the grant just made has no status.namespace yet (the
// Cluster reconciler writes it next, while the agent already attaches);
// the grant made the namespace by the same rule, checked it is the
// Cluster's (names.NamespaceIsFor), and only then made the request
// ServiceAccount in it. uid, when the authenticator gives one, must be the
// ServiceAccount's.
//
// Everything is read from upstream objects (reader: a cache or the API
// server); nothing the caller sends but its authenticated name chooses the
// Cluster.
func ClusterForIdentity(ctx context.Context, reader client.Reader, username, uid string) (string, error) {
	rest, ok := strings.CutPrefix(username, serviceAccountPrefix)
	if !ok {
		return "", fmt.Errorf("%w: %q is not a ServiceAccount", ErrNotAnAgent, username)
	}
	ns, name, ok := strings.Cut(rest, ":")
	if !ok || ns == "" || name == "" || strings.Contains(name, ":") {
		return "", fmt.Errorf("%w: malformed ServiceAccount user %q", ErrNotAnAgent, username)
	}
	sa := &corev1.ServiceAccount{}
	if err := get(ctx, reader, ns, name, sa); err != nil {
		return "", err
	}
	if uid != "" && string(sa.UID) != uid {
		return "", fmt.Errorf("%w: ServiceAccount %s/%s is not the one the identity was issued for", ErrNotAnAgent, ns, name)
	}
	regName, regNS := sa.Labels[registration.RegistrationLabel], sa.Labels[registration.RegistrationNamespaceLabel]
	if regName == "" || regNS == "" || name != registration.RequestServiceAccountName(regName) {
		return "", fmt.Errorf("%w: ServiceAccount %s/%s is no registration's request identity", ErrNotAnAgent, ns, name)
	}
	reg := &fleet.ClusterRegistration{}
	if err := get(ctx, reader, regNS, regName, reg); err != nil {
		return "", err
	}
	if !reg.Status.Granted || !reg.DeletionTimestamp.IsZero() {
		return "", fmt.Errorf("%w: ClusterRegistration %s/%s is not granted", ErrNotAnAgent, regNS, regName)
	}
	clusterName := sa.Annotations[fleet.ClusterAnnotation]
	if clusterName == "" {
		return "", fmt.Errorf("%w: ServiceAccount %s/%s names no Cluster", ErrNotAnAgent, ns, name)
	}
	cluster := &fleet.Cluster{}
	if err := get(ctx, reader, regNS, clusterName, cluster); err != nil {
		return "", err
	}
	if !belongsTo(reg, cluster) {
		return "", fmt.Errorf("%w: ClusterRegistration %s/%s does not belong to Cluster %s", ErrNotAnAgent, regNS, regName, clusterName)
	}
	if ns != names.ClusterNamespace(regNS, clusterName) || (cluster.Status.Namespace != "" && cluster.Status.Namespace != ns) ||
		!cluster.DeletionTimestamp.IsZero() {
		return "", fmt.Errorf("%w: Cluster %s/%s is not the cluster of namespace %s", ErrNotAnAgent, regNS, clusterName, ns)
	}
	return regNS + "/" + clusterName, nil
}

// belongsTo says whether the grant of reg matched or made cluster: the
// grant records the Cluster's name, and the Cluster has the registration's
// clientID (a Cluster deleted and made again under the same name took its
// registrations with it: the Cluster reconciler deletes them).
func belongsTo(reg *fleet.ClusterRegistration, cluster *fleet.Cluster) bool {
	return reg.Status.ClusterName == cluster.Name && reg.Spec.ClientID != "" && reg.Spec.ClientID == cluster.Spec.ClientID
}

func get(ctx context.Context, reader client.Reader, ns, name string, obj client.Object) error {
	if err := reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("%w: %T %s/%s not found", ErrNotAnAgent, obj, ns, name)
		}
		return fmt.Errorf("reading %s/%s: %w", ns, name, err)
	}
	return nil
}

// AuthorizeAttach is ClusterForIdentity for an attach request naming
// Cluster workspace/name in its URL: it refuses when the identity maps to
// another Cluster.
func AuthorizeAttach(ctx context.Context, reader client.Reader, username, uid, workspace, name string) (string, error) {
	key, err := ClusterForIdentity(ctx, reader, username, uid)
	if err != nil {
		return "", err
	}
	if key != workspace+"/"+name {
		return "", fmt.Errorf("%w: %s may hold the tunnel of Cluster %s, not %s/%s", ErrNotAnAgent, username, key, workspace, name)
	}
	return key, nil
}

// ParseAttachPath returns the Cluster an attach path
// (/apis/proxy.fleet.cattle.io/v1alpha1/namespaces/<ws>/clusters/<name>/attach)
// names.
func ParseAttachPath(path string) (workspace, name string, ok bool) {
	rest, ok := strings.CutPrefix(path, "/apis/"+ProxyGroup+"/"+ProxyVersion+"/namespaces/")
	if !ok {
		return "", "", false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 4 || parts[1] != "clusters" || parts[3] != "attach" {
		return "", "", false
	}
	ws, err1 := url.PathUnescape(parts[0])
	n, err2 := url.PathUnescape(parts[2])
	if err1 != nil || err2 != nil || ws == "" || n == "" || strings.Contains(ws+n, "/") {
		return "", "", false
	}
	return ws, n, true
}

// AttachAuthenticator is a Server.Authenticate for attach requests: user
// returns the caller's authenticated name and UID (fleet-proxy: from
// requestheader authentication, which believes only the aggregator's client
// certificate), the Cluster comes from the request path, and
// AuthorizeAttach decides.
func AttachAuthenticator(reader client.Reader, user func(*http.Request) (name, uid string, err error)) func(*http.Request) (string, error) {
	return func(req *http.Request) (string, error) {
		workspace, name, ok := ParseAttachPath(req.URL.Path)
		if !ok {
			return "", fmt.Errorf("%w: %q is not an attach path", ErrNotAnAgent, req.URL.Path)
		}
		username, uid, err := user(req)
		if err != nil {
			return "", err
		}
		return AuthorizeAttach(req.Context(), reader, username, uid, workspace, name)
	}
}
