// Package remote owns the controller's connections to downstream clusters:
// it builds a client from a kubeconfig once, reuses it while the kubeconfig
// stays the same, and turns connection errors into condition reasons a
// person can act on.
package remote

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sync"

	"github.com/fluxcd/pkg/ssa"
	ssaerrors "github.com/fluxcd/pkg/ssa/errors"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller/remote/restconfig"
	"github.com/gitops-fleet/fleet/internal/apply"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/connerr"
)

// Client is a connection to one downstream cluster.
type Client struct {
	Client  client.Client
	Applier *ssa.ResourceManager
	Host    string

	httpClient *http.Client
	prepare    sync.Once
}

// Cache holds one Client per Cluster, rebuilt when its kubeconfig changes.
type Cache struct {
	Scheme *runtime.Scheme

	mu      sync.Mutex
	entries map[types.NamespacedName]*entry
}

type entry struct {
	hash   string
	client *Client
}

// NewCache returns an empty cache whose clients use scheme.
func NewCache(scheme *runtime.Scheme) *Cache {
	return &Cache{Scheme: scheme, entries: map[types.NamespacedName]*entry{}}
}

// Get returns the client for a Cluster's kubeconfig, checked against the
// policy in force (a client is rebuilt, and checked again, when either
// changes). A kubeconfig restconfig refuses is an *InputError with its
// reason.
func (c *Cache) Get(cluster types.NamespacedName, kubeconfig []byte, allow config.InsecureKubeconfig) (*Client, error) {
	h := sha256.New()
	h.Write(kubeconfig)
	fmt.Fprintf(h, "\x00%+v", allow)
	hash := hex.EncodeToString(h.Sum(nil))
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[cluster]; ok {
		if e.hash == hash {
			return e.client, nil
		}
		e.client.close()
		delete(c.entries, cluster)
	}
	cfg, err := restconfig.RESTConfig(kubeconfig, allow)
	if err != nil {
		var kcErr *restconfig.Error
		if errors.As(err, &kcErr) {
			return nil, &InputError{Reason: kcErr.Reason, Err: kcErr.Err}
		}
		return nil, err
	}
	cl, err := newClient(cfg, c.Scheme)
	if err != nil {
		return nil, err
	}
	c.entries[cluster] = &entry{hash: hash, client: cl}
	return cl, nil
}

// Forget drops a Cluster's client.
func (c *Cache) Forget(cluster types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[cluster]; ok {
		e.client.close()
		delete(c.entries, cluster)
	}
}

func newClient(cfg *rest.Config, scheme *runtime.Scheme) (*Client, error) {
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, &InputError{Reason: fleet.KubeConfigInvalidReason, Err: fmt.Errorf("the kubeconfig's TLS or credential settings are invalid: %w", err)}
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme, Mapper: mapper, HTTPClient: httpClient})
	if err != nil {
		return nil, err
	}
	return &Client{Client: c, Applier: apply.NewManager(c), Host: cfg.Host, httpClient: httpClient}, nil
}

func (c *Client) close() { c.httpClient.CloseIdleConnections() }

// Prepare learns the REST mappings of kinds from the cluster in the
// background, once per client: the discovery requests (two, /api and /apis,
// where the server offers aggregated discovery) and the connection's TLS
// handshake are then done when the first push starts, having run while the
// import token was prepared. It writes nothing; an error is left for the
// push to meet and report.
func (c *Client) Prepare(kinds []schema.GroupKind) {
	c.prepare.Do(func() {
		go func() {
			mapper := c.Client.RESTMapper()
			for _, gk := range kinds {
				if _, err := mapper.RESTMapping(gk); err != nil && !meta.IsNoMatchError(err) {
					return // unreachable or refused: the push says so
				}
			}
		}()
	})
}

// InputError is a problem with what the user gave (kubeconfig, Secret): it
// will not go away by retrying.
type InputError struct {
	Reason string
	Err    error
}

func (e *InputError) Error() string { return e.Err.Error() }
func (e *InputError) Unwrap() error { return e.Err }

// Classify names what went wrong talking to a downstream cluster, as a
// condition reason and a message that says what to check. It goes by the
// errors' types (crypto/tls, crypto/x509, the API status, net), never by
// their text.
func Classify(host string, err error) (reason, message string) {
	var inputErr *InputError
	var urlErr *url.Error
	var netErr net.Error
	var opErr *net.OpError
	switch {
	case errors.As(err, &inputErr):
		return inputErr.Reason, inputErr.Error()
	case connerr.IsTLS(err):
		return fleet.DownstreamTLSErrorReason, fmt.Sprintf("TLS with %s failed: the kubeconfig's certificate-authority-data does not match the server's certificate (%v); update the kubeconfig Secret", host, err)
	case apierrors.IsUnauthorized(err):
		return fleet.DownstreamUnauthorizedReason, fmt.Sprintf("%s rejected the kubeconfig's credentials (401 Unauthorized); refresh the credentials in the kubeconfig Secret", host)
	case apierrors.IsForbidden(err):
		return fleet.DownstreamForbiddenReason, fmt.Sprintf("the kubeconfig's identity may not deploy the agent on %s (403 Forbidden: %v); it needs cluster-admin rights", host, apierrors.ReasonForError(err))
	case ssaerrors.IsImmutableError(err):
		// A field manager conflict (409) or an update the API server
		// refuses over the object that is there (422, an immutable field):
		// fluxcd/pkg/ssa's rule, which is kubectl's.
		return fleet.ApplyConflictReason, fmt.Sprintf("the agent cannot be applied to %s over what is there: %v; delete the conflicting object downstream (fleet recreates it)", host, err)
	case errors.As(err, &opErr), errors.As(err, &urlErr), errors.As(err, &netErr):
		return fleet.DownstreamUnreachableReason, fmt.Sprintf("cannot reach %s: %v; check the server URL in the kubeconfig Secret and the network path from the fleet controller", host, err)
	}
	return fleet.ApplyFailedReason, fmt.Sprintf("deploying the agent to %s failed: %v", host, err)
}
