package proxy

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	certutil "k8s.io/client-go/util/cert"

	"github.com/gitops-fleet/fleet/internal/endpoints"
	"github.com/gitops-fleet/fleet/internal/tunnel"
)

// PeerSecret holds the token fleet-proxy replicas authenticate each other
// with (key tunnel.PeerTokenKey), in fleet-proxy's namespace; made by the
// first replica that finds it missing.
const PeerSecret = "fleet-proxy-peer"

// PeerPath is where a replica accepts the connections of its peers, on its
// own listener. Peers dial pod IPs directly; the aggregator forwards only
// the API group's paths, and the peer token is the only credential this
// path accepts (serverOptions.Peer).
const PeerPath = "/fleet-proxy/peer"

// EnsurePeerToken reads the peer token from Secret fleet-proxy-peer in
// namespace, making the Secret with a random token if it is missing (two
// replicas making it at once agree on the one that was created first). The
// error never contains the token.
func EnsurePeerToken(ctx context.Context, c kubernetes.Interface, namespace string) (string, error) {
	secrets := c.CoreV1().Secrets(namespace)
	s, err := secrets.Get(ctx, PeerSecret, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return "", err
		}
		s, err = secrets.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: PeerSecret,
				Labels: map[string]string{"app.kubernetes.io/name": "fleet-proxy"}},
			Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{tunnel.PeerTokenKey: []byte(hex.EncodeToString(b))},
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			s, err = secrets.Get(ctx, PeerSecret, metav1.GetOptions{})
		}
	}
	if err != nil {
		return "", fmt.Errorf("reading Secret %s/%s: %w", namespace, PeerSecret, err)
	}
	token := string(s.Data[tunnel.PeerTokenKey])
	if len(token) < 32 {
		return "", fmt.Errorf("Secret %s/%s: key %q missing or shorter than 32 bytes", namespace, PeerSecret, tunnel.PeerTokenKey)
	}
	return token, nil
}

// PeerID names a replica among its peers: the address its peers dial,
// "<pod IP>:<port>", as the EndpointSlices of fleet-proxy's Service list it.
func PeerID(ip string, port int) string { return net.JoinHostPort(ip, strconv.Itoa(port)) }

// Peering configures StartPeering.
type Peering struct {
	// Client reads the peer token Secret (making it when missing) and
	// watches the EndpointSlices of Service.
	Client    kubernetes.Interface
	Namespace string
	// Service is fleet-proxy's Service: its ready endpoints are the
	// replicas; the serving certificate names <Service>.<Namespace>.svc.
	Service string
	// PodIP and Port are this replica's address (the downward API's
	// status.podIP and the listener's port): it is no peer of itself.
	PodIP string
	Port  int
	// ServingCA verifies the peers' serving certificate (Secret
	// fleet-proxy-tls, shared by the replicas).
	ServingCA []byte
}

// StartPeering makes this replica one of fleet-proxy's replicas that reach
// each other's agents: it reads (or makes) the peer token, verifies peers
// by ServingCA and the name <service>.<namespace>.svc, and keeps the peers
// set to the other ready endpoints of the Service until ctx ends. Its
// serverOptions.Peer must be t.Server.PeerHandler(), at PeerPath.
func (t *TunnelServer) StartPeering(ctx context.Context, p Peering) error {
	if p.Client == nil || p.Namespace == "" || p.Service == "" || p.PodIP == "" || p.Port == 0 {
		return errors.New("peering needs a client, the namespace, the Service, this pod's IP and port")
	}
	pool, err := certutil.NewPoolFromBytes(p.ServingCA)
	if err != nil {
		return fmt.Errorf("the CA that verifies peers: %w", err)
	}
	token, err := EnsurePeerToken(ctx, p.Client, p.Namespace)
	if err != nil {
		return err
	}
	self := PeerID(p.PodIP, p.Port)
	tlsConfig := &tls.Config{RootCAs: pool, ServerName: p.Service + "." + p.Namespace + ".svc", MinVersion: tls.VersionTLS12}
	if err := t.Server.EnablePeering(self, token, tlsConfig); err != nil {
		return err
	}
	return discoverPeers(ctx, p.Client, p.Namespace, p.Service, self, t.Server.SetPeers)
}

// discoverPeers calls set with the ready endpoints of Service service but
// self (id → URL of their PeerPath) whenever its EndpointSlices change,
// until ctx ends. It returns once it has read them.
func discoverPeers(ctx context.Context, c kubernetes.Interface, namespace, service, self string, set func(map[string]string)) error {
	selector := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: service}).String()
	f := informers.NewSharedInformerFactoryWithOptions(c, 10*time.Minute, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
	inf := f.Discovery().V1().EndpointSlices()
	lister := inf.Lister()
	var (
		mu      sync.Mutex
		last    map[string]string
		stopped bool
	)
	update := func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		slices, err := lister.List(labels.Everything())
		if err != nil {
			return
		}
		peers := readyPeers(slices, self)
		if maps.Equal(peers, last) {
			return
		}
		last = peers
		set(peers)
	}
	// This replica stops: it drops its peers (their connections end).
	context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		set(map[string]string{})
	})
	if _, err := inf.Informer().AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { update() },
		UpdateFunc: func(any, any) { update() },
		DeleteFunc: func(any) { update() },
	}); err != nil {
		return err
	}
	f.Start(ctx.Done())
	for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("watching the EndpointSlices of Service %s/%s: %v did not sync", namespace, service, typ)
		}
	}
	return nil
}

// readyPeers are the ready endpoints of slices, by PeerID, but self. The
// port is the slice's "https" port (or its only one).
func readyPeers(slices []*discoveryv1.EndpointSlice, self string) map[string]string {
	peers := map[string]string{}
	for _, id := range endpoints.Ready(slices, "https") {
		if id != self {
			peers[id] = "wss://" + id + PeerPath
		}
	}
	return peers
}
