package agent

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gitops-fleet/fleet/agent/access"
	proxyv1 "github.com/gitops-fleet/fleet/api/proxy/v1alpha1"
	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/assertion"
	"github.com/gitops-fleet/fleet/internal/certhost"
	"github.com/gitops-fleet/fleet/internal/direct"
	"github.com/gitops-fleet/fleet/internal/registration"
)

// The authorized cluster endpoint (docs/design/cluster-access.md): every replica
// serves it on its own, from what it keeps downstream, so that it works
// while the upstream is unreachable: the agent's credential (which Cluster
// this is), the signing keys and the revocation list it last read (Secret
// fleet-agent-direct-tls holds the serving certificate, ConfigMap
// fleet-agent-direct-state the rest). While the upstream is reachable it
// reads the revocation list every DirectSyncInterval and the keys every
// access.DefaultKeysInterval.

// DirectModeAgent and DirectModeWebhook are the modes of the endpoint.
const (
	DirectModeAgent   = "agent"
	DirectModeWebhook = "webhook"
)

// directState is what ConfigMap fleet-agent-direct-state keeps.
type directState struct {
	// Audience is "<workspace>/<cluster>" the state belongs to.
	Audience string                 `json:"audience"`
	Keys     json.RawMessage        `json:"keys,omitempty"`
	Revoked  []proxyv1.RevokedToken `json:"revoked"`
}

const directStateKey = "state.json"

// directManagedLabel marks the Secret and ConfigMap the agent made for the
// endpoint (a TLS Secret without it is the operator's, never replaced).
const directManagedLabel = registration.DirectLabel

// runDirect serves the direct endpoint until ctx ends, starting again
// when the stored credential names another Cluster.
func (a *Agent) runDirect(ctx context.Context) error {
	return a.perCredential(ctx, a.log.WithName("direct"), "serving the direct endpoint", a.serveDirect, nil)
}

// serveDirect serves the endpoint for cred's Cluster.
func (a *Agent) serveDirect(ctx context.Context, cred *credential) error {
	audience := cred.ClusterNamespace + "/" + cred.ClusterName
	log := a.log.WithName("direct").WithValues("cluster", audience, "mode", a.opts.DirectMode)
	cert, caPEM, err := a.ensureDirectTLS(ctx)
	if err != nil {
		return err
	}
	certNames := a.checkDirectCertificate(ctx, cert)
	state := a.loadDirectState(ctx, audience)
	keys := assertion.NewKeySet()
	if len(state.Keys) > 0 {
		if ks, err := assertion.ParseKeySet(state.Keys); err == nil {
			keys = ks
		}
	}
	rev := access.NewRevocations()
	rev.Set(state.Revoked, time.Now())

	up, tokens, err := a.upstreamFor(ctx, cred)
	if err != nil {
		return err
	}
	upKeys, err := access.UpstreamKeys(up)
	if err != nil {
		return err
	}
	var audiences []string
	if a.opts.DirectMode == DirectModeWebhook {
		if audiences, err = a.directAPIAudiences(ctx); err != nil {
			return err
		}
		log.Info("the token webhook answers for the API server's audiences only", "audiences", audiences,
			"configured", len(a.opts.DirectAPIAudiences) > 0)
	}
	persist := make(chan struct{}, 1)
	changed := func() {
		select {
		case persist <- struct{}{}:
		default:
		}
	}
	h, err := access.New(access.Options{
		Audience:     audience,
		Verifier:     assertion.NewVerifier(keys),
		RefreshKeys:  upKeys,
		KeysChanged:  func(*assertion.KeySet) { changed() },
		Local:        rest.CopyConfig(a.opts.Local),
		Log:          log,
		Direct:       true,
		APIAudiences: audiences,
		Registerer:   replacing(a.opts.Registerer),
		// The tunnel's handler collects unused impersonators.
		GCInterval: 365 * 24 * time.Hour,
	})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	if a.opts.DirectMode == DirectModeWebhook {
		mux.Handle(direct.AuthenticatePath, h.ServeTokenReview(rev))
	} else {
		mux.Handle("/", h.ServeDirect(rev))
	}
	l, err := net.Listen("tcp", a.opts.DirectAddress)
	if err != nil {
		return fmt.Errorf("direct endpoint: %w", err)
	}
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 30 * time.Second,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ErrorLog:          nil,
	}
	log.Info("serving the direct endpoint", "address", l.Addr().String(), "keys", len(keys.KeyIDs()), "revoked", rev.Len())

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		err := srv.ServeTLS(l, "", "")
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	})
	g.Go(func() error {
		<-gctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
		return nil
	})
	g.Go(func() error { return h.Run(gctx) }) // the keys: at start and every access.DefaultKeysInterval
	g.Go(func() error {
		return a.syncDirect(gctx, cred, up, tokens, rev, caPEM, certNames, changed, persist, h)
	})
	return g.Wait()
}

// syncDirect, until ctx ends: follows the stored credential (an error when
// it names another Cluster), reads the revocation list every
// DirectSyncInterval, reports the endpoint's CA and its certificate's names
// on the Cluster, and keeps the state ConfigMap current.
func (a *Agent) syncDirect(ctx context.Context, cred *credential, up *rest.Config, tokens *tokenSource, rev *access.Revocations,
	caPEM []byte, certNames []string, changed func(), persist <-chan struct{}, h *access.Handler) error {
	log := a.log.WithName("direct")
	fetchRevocations, err := access.UpstreamRevocations(up, cred.ClusterNamespace, cred.ClusterName)
	if err != nil {
		return err
	}
	etag := ""
	reported := false
	failing := false
	t := time.NewTicker(a.opts.DirectSyncInterval)
	defer t.Stop()
	for {
		now, err := readCredential(ctx, a.local, a.opts.Namespace)
		switch {
		case err != nil:
		case now == nil || !sameIdentity(now, cred):
			return errIdentityChanged
		default:
			tokens.set(now.Token)
		}
		list, tag, err := fetchRevocations(ctx, etag)
		switch {
		case err != nil:
			if !failing && ctx.Err() == nil {
				log.Error(err, "cannot read the revocation list from the upstream; serving with the last one read until it answers (tokens still expire)", "revoked", rev.Len())
			}
			failing = true
		default:
			if failing {
				log.Info("reading the revocation list again")
			}
			failing = false
			if list != nil {
				etag = tag
				if rev.Set(list, time.Now()) {
					log.Info("revocation list changed", "revoked", rev.Len())
					changed()
				}
			}
		}
		// The upstream API server takes the report even while fleet-proxy,
		// which serves the revocation list, does not answer.
		if !reported {
			reported = a.reportDirectEndpoint(ctx, up, cred, a.directCA(caPEM), certNames) == nil
		}
		// Keep what changed (revocations, keys refreshed by the handler),
		// then wait for the next round or the next change.
		save := func() {
			a.saveDirectState(ctx, directState{Audience: cred.ClusterNamespace + "/" + cred.ClusterName, Keys: keysJSON(h), Revoked: rev.List()})
		}
		select {
		case <-persist:
			save()
		default:
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-persist:
			save()
		}
	}
}

func keysJSON(h *access.Handler) json.RawMessage {
	b, err := json.Marshal(h.Keys())
	if err != nil {
		return nil
	}
	return b
}

// agentServiceAccount is the agent's ServiceAccount (the chart's).
const agentServiceAccount = "fleet-agent"

// directAPIAudiences are the audiences the token webhook answers for: the
// configured ones, else the local API server's own (asked of it).
func (a *Agent) directAPIAudiences(ctx context.Context) ([]string, error) {
	if len(a.opts.DirectAPIAudiences) > 0 {
		return a.opts.DirectAPIAudiences, nil
	}
	cs, err := kubernetes.NewForConfig(a.opts.Local)
	if err != nil {
		return nil, err
	}
	auds, err := access.DiscoverAPIAudiences(ctx, cs, a.opts.Namespace, agentServiceAccount)
	if err != nil {
		return nil, fmt.Errorf("token webhook: %w (or set the API server's audiences: spec.agentDirectEndpoint.apiAudiences)", err)
	}
	return auds, nil
}

// directCA is the CA users verify the endpoint with: the agent's own
// (mode agent), or the local API server's (mode webhook: users talk to it).
func (a *Agent) directCA(own []byte) []byte {
	if a.opts.DirectMode != DirectModeWebhook {
		return own
	}
	if len(a.opts.Local.CAData) > 0 {
		return a.opts.Local.CAData
	}
	if a.opts.Local.CAFile != "" {
		if b, err := os.ReadFile(a.opts.Local.CAFile); err == nil {
			return b
		}
	}
	return own
}

// checkDirectCertificate checks that the serving certificate covers the
// host of the url users dial (mode agent: in mode webhook users dial the API
// server) and returns its names, for the Cluster's status, where the
// controller reports a mismatch (condition DirectEndpoint, a Warning event).
// A certificate that does not cover it is served anyway (it may be the
// operator's own, and a url may be about to change), and said here too: in
// the log and as an event on the agent's pod.
func (a *Agent) checkDirectCertificate(ctx context.Context, cert tls.Certificate) []string {
	if a.opts.DirectMode == DirectModeWebhook || cert.Leaf == nil {
		return nil
	}
	names := certhost.Names(cert.Leaf)
	var m *certhost.Mismatch
	if a.opts.DirectURL != "" && errors.As(certhost.Check(names, a.opts.DirectURL), &m) {
		msg := fmt.Sprintf("the direct endpoint's serving certificate (Secret %s) does not cover host %q of the endpoint's url %s: %v; kubectl's direct context fails with an x509 error. "+
			"Make the certificate again with %q among its subject alternative names (or delete the Secret, and the agent makes one that covers it), or set spec.agentDirectEndpoint.url to one of its names",
			direct.TLSSecretName, m.Host, a.opts.DirectURL, m, m.Host)
		a.log.WithName("direct").Info(msg, "reason", fleet.DirectCertificateHostMismatchReason)
		a.event(ctx, corev1.EventTypeWarning, fleet.DirectCertificateHostMismatchReason, msg)
	}
	return names
}

// reportDirectEndpoint writes the endpoint's CA and its certificate's
// names into the Cluster's status.agent (directEndpointCA,
// directEndpointCertificateNames) when they differ.
func (a *Agent) reportDirectEndpoint(ctx context.Context, up *rest.Config, cred *credential, caPEM []byte, certNames []string) error {
	c, err := newClient(up)
	if err != nil {
		return err
	}
	cluster := &fleet.Cluster{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: cred.ClusterNamespace, Name: cred.ClusterName}, cluster); err != nil {
		return err
	}
	if cluster.Status.Agent.DirectEndpointCA == string(caPEM) && slices.Equal(cluster.Status.Agent.DirectEndpointCertificateNames, certNames) {
		return nil
	}
	// null removes names reported before (mode webhook now).
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"agent": map[string]any{"directEndpointCA": string(caPEM), "directEndpointCertificateNames": certNames}}})
	if err != nil {
		return err
	}
	if err := c.Status().Patch(ctx, cluster, client.RawPatch(types.MergePatchType, patch)); err != nil {
		a.log.WithName("direct").Error(err, "could not report the direct endpoint's CA and certificate names on the Cluster")
		return err
	}
	return nil
}

// directCertRenewBefore: a serving certificate that expires sooner is made
// again at start.
const directCertRenewBefore = 30 * 24 * time.Hour

// ensureDirectTLS reads Secret fleet-agent-direct-tls, making it (a
// self-signed CA and a certificate for the endpoint's names) when it is
// missing or its certificate expires within 30 days. An operator's own
// Secret (without the agent's label) is used as it is.
func (a *Agent) ensureDirectTLS(ctx context.Context) (tls.Certificate, []byte, error) {
	key := client.ObjectKey{Namespace: a.opts.Namespace, Name: direct.TLSSecretName}
	s := &corev1.Secret{}
	err := a.local.Get(ctx, key, s)
	switch {
	case err == nil:
		cert, ca, perr := directTLSFrom(s)
		_, ours := s.Labels[directManagedLabel]
		if perr == nil && (!ours || time.Until(cert.Leaf.NotAfter) > directCertRenewBefore && a.coversURL(cert)) {
			return cert, ca, nil
		}
		if !ours {
			return tls.Certificate{}, nil, fmt.Errorf("Secret %s: %w", key, perr)
		}
		if err := a.local.Delete(ctx, s, client.Preconditions{ResourceVersion: &s.ResourceVersion}); err != nil && !apierrors.IsNotFound(err) {
			return tls.Certificate{}, nil, err
		}
	case !apierrors.IsNotFound(err):
		return tls.Certificate{}, nil, err
	}
	host, ips, dns := a.directNames()
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey(host, ips, dns)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	// The certificate PEM holds the leaf then its CA.
	rest := certPEM
	var caPEM []byte
	for {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		caPEM = pem.EncodeToMemory(blk)
	}
	s = &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Labels: map[string]string{directManagedLabel: "true"}},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM, "ca.crt": caPEM},
	}
	if err := a.local.Create(ctx, s); apierrors.IsAlreadyExists(err) {
		// Another replica made it first: use that one.
		if err := a.local.Get(ctx, key, s); err != nil {
			return tls.Certificate{}, nil, err
		}
	} else if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("creating Secret %s: %w", key, err)
	}
	cert, ca, err := directTLSFrom(s)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("Secret %s: %w", key, err)
	}
	return cert, ca, nil
}

// coversURL reports whether cert covers the host of the endpoint's url (or
// there is no url): a certificate the agent made for an earlier url is made
// again.
func (a *Agent) coversURL(cert tls.Certificate) bool {
	return a.opts.DirectURL == "" || certhost.Check(certhost.Names(cert.Leaf), a.opts.DirectURL) == nil
}

func directTLSFrom(s *corev1.Secret) (tls.Certificate, []byte, error) {
	cert, err := tls.X509KeyPair(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return tls.Certificate{}, nil, err
		}
	}
	ca := s.Data["ca.crt"]
	if len(ca) == 0 {
		ca = s.Data[corev1.TLSCertKey]
	}
	return cert, ca, nil
}

// directNames are the serving certificate's names: the URL's host, the
// configured hosts, and the Service's in-cluster names.
func (a *Agent) directNames() (string, []net.IP, []string) {
	svc := direct.ServiceName + "." + a.opts.Namespace + ".svc"
	names := []string{svc, svc + ".cluster.local"}
	host := svc
	if u, err := url.Parse(a.opts.DirectURL); err == nil && u.Hostname() != "" {
		host = u.Hostname()
		names = append(names, host)
	}
	names = append(names, a.opts.DirectHosts...)
	var ips []net.IP
	var dns []string
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			ips = append(ips, ip)
		} else if n != "" && !slices.Contains(dns, n) {
			dns = append(dns, n)
		}
	}
	return host, ips, dns
}

// loadDirectState reads the state ConfigMap; a state of another Cluster,
// or none, is an empty one.
func (a *Agent) loadDirectState(ctx context.Context, audience string) directState {
	cm := &corev1.ConfigMap{}
	st := directState{Audience: audience}
	if err := a.local.Get(ctx, client.ObjectKey{Namespace: a.opts.Namespace, Name: direct.StateConfigMapName}, cm); err != nil {
		return st
	}
	var got directState
	if err := json.Unmarshal([]byte(cm.Data[directStateKey]), &got); err != nil || got.Audience != audience {
		return st
	}
	return got
}

// saveDirectState writes the state ConfigMap when it differs (a conflict
// with another replica is left to the next change).
func (a *Agent) saveDirectState(ctx context.Context, st directState) {
	b, err := json.Marshal(st)
	if err != nil {
		return
	}
	key := client.ObjectKey{Namespace: a.opts.Namespace, Name: direct.StateConfigMapName}
	cm := &corev1.ConfigMap{}
	err = a.local.Get(ctx, key, cm)
	switch {
	case apierrors.IsNotFound(err):
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name,
			Labels: map[string]string{directManagedLabel: "true"}}, Data: map[string]string{directStateKey: string(b)}}
		err = a.local.Create(ctx, cm)
	case err == nil && !bytes.Equal([]byte(cm.Data[directStateKey]), b):
		cm.Data = map[string]string{directStateKey: string(b)}
		err = a.local.Update(ctx, cm)
	}
	if err != nil && ctx.Err() == nil {
		a.log.WithName("direct").Error(err, "could not save the direct endpoint's state")
	}
}
