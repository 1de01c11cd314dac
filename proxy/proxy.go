package proxy

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/gitops-fleet/fleet/internal/scheme"
	"github.com/gitops-fleet/fleet/proxy/connected"
)

// DefaultTunnelRecheckPeriod is how often the agents' open tunnels are
// checked against the identity mapping besides on every change of what it
// reads.
const DefaultTunnelRecheckPeriod = time.Minute

// Options configure fleet-proxy: what `fleet proxy`'s flags say, and what
// tests give instead of files and flags.
type Options struct {
	// Config reaches the upstream API server as fleet-proxy. Required.
	Config *rest.Config
	// Namespace is fleet-proxy's (its Secrets, the published signing keys,
	// the direct token records, its pods). Required.
	Namespace string
	// Service is fleet-proxy's Service (default "fleet-proxy"): the serving
	// certificate names <Service>.<Namespace>.svc, its ready endpoints are
	// the peers.
	Service string

	// Listener is where fleet-proxy serves (TLS is added); nil: it listens
	// on Listen (default ":8443").
	Listener net.Listener
	Listen   string
	// The serving certificate: CertFile and KeyFile (and CAFile, the CA
	// that verifies it, which peering needs), or Certificate and ServingCA
	// in memory; none: Secret fleet-proxy-tls, made when missing, whose CA
	// is written into the APIService when SetAPIServiceCABundle.
	CertFile, KeyFile, CAFile string
	Certificate               *tls.Certificate
	ServingCA                 []byte
	SetAPIServiceCABundle     bool

	// The endpoint (endpoint.go: the clusters' proxy without the upstream
	// API server, bearer tokens only) is served on EndpointListener, else
	// on EndpointListen; neither: not served. Its certificate is
	// EndpointCertFile and EndpointKeyFile, with EndpointCAFile the CA
	// that verifies it; none: the serving certificate and its CA.
	// PublishEndpointCA writes that CA into ConfigMap
	// kube-public/fleet-proxy-endpoint, where `fleet kubeconfig` finds it.
	EndpointListener                                  net.Listener
	EndpointListen                                    string
	EndpointCertFile, EndpointKeyFile, EndpointCAFile string
	PublishEndpointCA                                 bool
	endpointCert                                      *tls.Certificate
	endpointCA                                        []byte

	// PodIP is this replica's address: the other ready endpoints of
	// Service are its peers (empty: no peering, one replica only).
	PodIP string
	// Replica names this replica in the Connected condition (default:
	// $POD_NAME, else the host name).
	Replica string
	// SigningKey is the private key this replica signs with (nil: a new
	// one; tests give one to make tokens fleet-proxy would never issue).
	SigningKey ed25519.PrivateKey

	// Registerer gets the metrics (nil: controller-runtime's registry).
	// MetricsAddress serves them, when Registerer is also a Gatherer or
	// nil ("" or "0": no metrics endpoint).
	Registerer     prometheus.Registerer
	MetricsAddress string
	// Log (zero: controller-runtime's logger).
	Log logr.Logger

	// Direct tokens: see serverOptions and RegistryOptions (zero: their
	// defaults); DirectRecheckInterval is how often the holders of live
	// tokens are checked (zero: 10 s).
	DirectTokenMaxLifetime           time.Duration
	DirectTokenUnverifiedMaxLifetime time.Duration
	DirectTokensPerUser              int
	DirectTokenIssueLimit            int
	DirectTokenIssueWindow           time.Duration
	DirectRecheckInterval            time.Duration

	// TunnelRecheckPeriod (zero: DefaultTunnelRecheckPeriod) and
	// ConnectedSweepInterval (zero: connected.DefaultSweepInterval).
	TunnelRecheckPeriod    time.Duration
	ConnectedSweepInterval time.Duration
	// StreamRecheckInterval: see serverOptions.
	StreamRecheckInterval time.Duration
}

// Proxy is fleet-proxy wired whole (docs/design/cluster-access.md): the
// HTTPS server, its signing keys, the agents' tunnels with the identity
// cache that maps them, the Connected condition, the direct token registry,
// peering. New makes the parts; Run starts them in order and serves.
type Proxy struct {
	o          Options
	cs         kubernetes.Interface
	keys       *SigningKeys
	identities cache.Cache
	tunnels    *TunnelServer
	broadcast  events.EventBroadcaster
	status     *connected.Reporter
	registry   *Registry
	server     *Server
	gatherer   prometheus.Gatherer
	started    chan struct{}
}

// New makes fleet-proxy from o; nothing runs and nothing is read from the
// upstream before Run (the certificate files are read here).
func New(o Options) (*Proxy, error) {
	if o.Config == nil || o.Namespace == "" {
		return nil, errors.New("proxy: Config and Namespace are required")
	}
	if o.Service == "" {
		o.Service = "fleet-proxy"
	}
	if o.Listen == "" {
		o.Listen = ":8443"
	}
	if o.Log.GetSink() == nil {
		o.Log = ctrllog.Log
	}
	if o.TunnelRecheckPeriod <= 0 {
		o.TunnelRecheckPeriod = DefaultTunnelRecheckPeriod
	}
	var gatherer prometheus.Gatherer
	if o.Registerer == nil {
		o.Registerer, gatherer = crmetrics.Registry, crmetrics.Registry
	} else {
		gatherer, _ = o.Registerer.(prometheus.Gatherer)
	}
	if o.Replica == "" {
		var err error
		if o.Replica, err = connected.ReplicaName(); err != nil {
			return nil, fmt.Errorf("naming this replica: %w", err)
		}
	}
	if err := o.loadCertificate(); err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(o.Config)
	if err != nil {
		return nil, err
	}
	md, err := metadata.NewForConfig(o.Config)
	if err != nil {
		return nil, err
	}
	p := &Proxy{o: o, cs: cs, gatherer: gatherer, started: make(chan struct{})}

	// This replica's signing key, in memory only; Run publishes it (and
	// deletes the Secret of earlier releases) before anything is signed.
	if p.keys, err = NewSigningKeys(SigningOptions{Client: cs, Namespace: o.Namespace, Replica: o.Replica,
		Key: o.SigningKey, Log: o.Log.WithName("signing-keys")}); err != nil {
		return nil, err
	}
	// The identity mapping of attach requests reads these, and only
	// these, from a cache: request ServiceAccounts (by their registration
	// label), ClusterRegistrations and Clusters.
	if p.identities, err = newIdentityCache(o.Config); err != nil {
		return nil, err
	}
	// The tunnel server tells changes what happens to sessions; the
	// Connected condition's reporter, made after it, works them off and
	// asks it who holds what.
	changes := connected.NewChanges(0, nil)
	if p.tunnels, err = NewTunnelServer(p.identities, TunnelOptions{Observer: changes, Registerer: o.Registerer,
		Log: o.Log.WithName("tunnel")}); err != nil {
		return nil, err
	}
	// The Connected condition and the tunnel events, written as
	// fleet-proxy (reads of Clusters go to the API server: a write is
	// decided on the version it is made against).
	writer, err := client.New(o.Config, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		return nil, err
	}
	p.broadcast = events.NewBroadcaster(&events.EventSinkImpl{Interface: cs.EventsV1()})
	if p.status, err = connected.New(connected.Options{
		Changes: changes, Client: writer, Lister: p.identities, Tunnels: p.tunnels.Server, Replica: o.Replica,
		Running:       connected.PodRunning(cs, o.Namespace),
		Recorder:      p.broadcast.NewRecorder(scheme.Scheme, "fleet-proxy"),
		SweepInterval: o.ConnectedSweepInterval,
		Log:           o.Log.WithName("connected"),
	}); err != nil {
		return nil, err
	}
	if p.registry, err = NewRegistry(RegistryOptions{Client: cs, Metadata: md, Namespace: o.Namespace,
		PerUser: o.DirectTokensPerUser, IssueLimit: o.DirectTokenIssueLimit, IssueWindow: o.DirectTokenIssueWindow}); err != nil {
		return nil, err
	}
	if p.server, err = newServer(serverOptions{Client: cs, Registerer: o.Registerer,
		Tunnels: p.tunnels, Attacher: p.tunnels, Agents: p.tunnels, DirectEndpoint: p.tunnels.DirectEndpoint,
		Peer: p.tunnels.Server.PeerHandler(), Asserter: p.keys, Keys: p.keys, DirectIssuer: p.keys, Registry: p.registry,
		DirectTokenMaxLifetime: o.DirectTokenMaxLifetime, DirectTokenUnverifiedMaxLifetime: o.DirectTokenUnverifiedMaxLifetime,
		StreamRecheckInterval: o.StreamRecheckInterval}); err != nil {
		return nil, err
	}
	return p, nil
}

// loadCertificate reads CertFile, KeyFile and CAFile into Certificate and
// ServingCA, and the endpoint's files.
func (o *Options) loadCertificate() error {
	var err error
	if o.endpointCert, o.endpointCA, err = loadKeyPair("the endpoint's serving certificate", o.EndpointCertFile, o.EndpointKeyFile, o.EndpointCAFile); err != nil {
		return err
	}
	if o.CertFile == "" && o.KeyFile == "" {
		return nil
	}
	o.Certificate, o.ServingCA, err = loadKeyPair("the serving certificate", o.CertFile, o.KeyFile, o.CAFile)
	return err
}

// loadKeyPair reads a certificate, its key and (when caFile is given) the
// CA that verifies it; nothing when no file is given.
func loadKeyPair(what, certFile, keyFile, caFile string) (*tls.Certificate, []byte, error) {
	if certFile == "" && keyFile == "" {
		return nil, nil, nil
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("loading %s: %w", what, err)
	}
	var ca []byte
	if caFile != "" {
		if ca, err = os.ReadFile(caFile); err != nil {
			return nil, nil, fmt.Errorf("reading the CA of %s: %w", what, err)
		}
	}
	return &cert, ca, nil
}

// Run starts the parts, in this order: the serving certificate (from its
// Secret when none was given), the signing key's publication, the identity
// cache, the tunnels' recheck, the event sink, the direct token registry,
// the requestheader settings, the listener, peering; then serves (and
// writes the Connected condition, rechecks direct tokens, serves metrics)
// until ctx ends or one of them fails.
func (p *Proxy) Run(ctx context.Context) error {
	o := p.o
	cert, ca := o.Certificate, o.ServingCA
	if cert == nil {
		c, caPEM, err := EnsureServingCertificate(ctx, p.cs, o.Namespace, o.Service)
		if err != nil {
			return err
		}
		cert, ca = &c, caPEM
		if o.SetAPIServiceCABundle {
			dc, err := dynamic.NewForConfig(o.Config)
			if err != nil {
				return err
			}
			if err := SetAPIServiceCABundle(ctx, dc, ca); err != nil {
				return err
			}
		}
	}
	if err := p.keys.Start(ctx); err != nil {
		return err
	}
	if err := startCache(ctx, p.identities); err != nil {
		return err
	}
	// An open tunnel ends when its identity loses the right.
	if err := p.tunnels.RecheckOnChange(ctx, p.identities, o.TunnelRecheckPeriod); err != nil {
		return err
	}
	if err := p.broadcast.StartRecordingToSinkWithContext(ctx); err != nil {
		return err
	}
	defer p.broadcast.Shutdown()
	if err := p.registry.Start(ctx); err != nil {
		return err
	}
	if err := p.server.Start(ctx); err != nil {
		return err
	}
	l := o.Listener
	if l == nil {
		var err error
		if l, err = net.Listen("tcp", o.Listen); err != nil {
			return err
		}
	}
	// The replicas reach each other's agents: a user's request may land
	// on any replica, an agent's tunnel on one.
	if o.PodIP == "" {
		o.Log.Info("no pod IP (--pod-ip, $POD_IP): this replica peers with no other; run one replica only")
	} else {
		if len(ca) == 0 {
			return errors.New("peering with other replicas needs the CA of the serving certificate (--tls-ca-file)")
		}
		if err := p.tunnels.StartPeering(ctx, Peering{Client: p.cs, Namespace: o.Namespace, Service: o.Service,
			PodIP: o.PodIP, Port: l.Addr().(*net.TCPAddr).Port, ServingCA: ca}); err != nil {
			return err
		}
	}
	el, endpointCert, err := p.endpointListener(ctx, cert, ca)
	if err != nil {
		return err
	}
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return p.status.Run(ctx) })
	g.Go(func() error { p.server.RunDirectRecheck(ctx, o.DirectRecheckInterval); return nil })
	g.Go(func() error { return p.server.Serve(ctx, tls.NewListener(l, TLSConfig(*cert))) })
	if el != nil {
		g.Go(func() error {
			return p.server.ServeEndpoint(ctx, tls.NewListener(el, EndpointTLSConfig(*endpointCert)))
		})
	}
	if o.MetricsAddress != "0" && o.MetricsAddress != "" && p.gatherer != nil {
		ms := &http.Server{Addr: o.MetricsAddress, ReadHeaderTimeout: 10 * time.Second,
			Handler: promhttp.HandlerFor(p.gatherer, promhttp.HandlerOpts{})}
		g.Go(func() error {
			go func() { <-ctx.Done(); _ = ms.Shutdown(context.Background()) }()
			if err := ms.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})
	}
	close(p.started)
	return g.Wait()
}

// endpointListener opens the endpoint's listener, when there is one, and
// publishes the CA of its certificate (its own, else the serving one).
func (p *Proxy) endpointListener(ctx context.Context, servingCert *tls.Certificate, servingCA []byte) (net.Listener, *tls.Certificate, error) {
	o := p.o
	if o.EndpointListener == nil && o.EndpointListen == "" {
		return nil, nil, nil
	}
	cert, ca := o.endpointCert, o.endpointCA
	if cert == nil {
		cert, ca = servingCert, servingCA
	}
	if o.PublishEndpointCA {
		if len(ca) == 0 {
			return nil, nil, errors.New("publishing the endpoint's CA needs it: --endpoint-tls-ca-file (or --tls-ca-file when the endpoint uses the serving certificate)")
		}
		if err := PublishEndpointCA(ctx, p.cs, ca); err != nil {
			return nil, nil, err
		}
	}
	l := o.EndpointListener
	if l == nil {
		var err error
		if l, err = net.Listen("tcp", o.EndpointListen); err != nil {
			return nil, nil, fmt.Errorf("the endpoint's listener: %w", err)
		}
	}
	return l, cert, nil
}

// Started is closed once Run serves.
func (p *Proxy) Started() <-chan struct{} { return p.started }

// Tunnels is the agents' tunnel server.
func (p *Proxy) Tunnels() *TunnelServer { return p.tunnels }

// SigningKeys are this replica's signing keys.
func (p *Proxy) SigningKeys() *SigningKeys { return p.keys }

// Registry records the direct tokens issued.
func (p *Proxy) Registry() *Registry { return p.registry }
