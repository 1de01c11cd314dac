package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/rest"

	"github.com/gitops-fleet/fleet/agent/access"
	"github.com/gitops-fleet/fleet/internal/assertion"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/tunnel"
)

// Cluster access (docs/design/cluster-access.md): every replica, leader or not,
// holds a tunnel to the upstream and serves what comes through it with the
// access handler, so the cluster stays reachable while one agent pod is
// gone. The replicas share the request identity the leader keeps in the
// local fleet-agent Secret; they read it and never write it.

// errIdentityChanged ends one access session: the stored credential now
// names another Cluster or upstream (the agent registered again).
var errIdentityChanged = errors.New("the stored credential names another cluster or upstream")

// runAccess holds the tunnel until ctx ends. It returns an error only when
// the tunnel stayed down longer than Options.TunnelDownLimit, which ends
// the process so that it starts afresh.
func (a *Agent) runAccess(ctx context.Context) error {
	return a.perCredential(ctx, a.log.WithName("access"), "opening the tunnel", a.serveAccess,
		func(err error) bool { return errors.Is(err, tunnel.ErrTunnelDown) })
}

// perCredential runs serve with the stored credential until ctx ends (the
// access and direct sides, in every replica): it waits for a credential,
// and starts serve again a second after it returns, unless ctx ended or
// fatal says the error ends the agent.
func (a *Agent) perCredential(ctx context.Context, log logr.Logger, what string,
	serve func(context.Context, *credential) error, fatal func(error) bool) error {
	waiting := false
	for ctx.Err() == nil {
		// Taken before the read: a write after it wakes the wait below.
		written := a.stored.next()
		cred, err := readCredential(ctx, a.local, a.opts.Namespace)
		if err != nil || cred == nil {
			if !waiting {
				if err != nil {
					log.Error(err, "cannot read the agent's credential; waiting before "+what, "reason", faultReason(err))
				} else {
					log.Info("waiting for the agent's credential before " + what)
				}
				waiting = true
			}
			if sleepOrWake(ctx, a.opts.CredentialPoll, written) != nil {
				return nil
			}
			continue
		}
		waiting = false
		err = serve(ctx, cred)
		switch {
		case ctx.Err() != nil:
			return nil
		case fatal != nil && fatal(err):
			return err
		case err != nil:
			log.Error(err, "session ended; starting again")
		}
		if sleep(ctx, time.Second) != nil {
			return nil
		}
	}
	return nil
}

// upstreamFor is the upstream config of cred, with the token source that
// follows the stored credential's renewals.
func (a *Agent) upstreamFor(ctx context.Context, cred *credential) (*rest.Config, *tokenSource, error) {
	tokens := newTokenSource(cred.Token)
	mode := config.TLSModeStrict
	if len(cred.APIServerCA) == 0 {
		mode = config.TLSModeSystemStore
	}
	up, err := upstreamConfig(ctx, cred.APIServerURL, cred.APIServerCA, mode, tokens, a.opts.SystemCAs)
	return up, tokens, err
}

// serveAccess runs one access session under cred: the tunnel client, the
// access handler's key refresh and impersonator GC, and a watch on the
// stored credential.
func (a *Agent) serveAccess(ctx context.Context, cred *credential) error {
	log := a.log.WithName("access").WithValues("cluster", cred.ClusterNamespace+"/"+cred.ClusterName)
	up, tokens, err := a.upstreamFor(ctx, cred)
	if err != nil {
		return err
	}
	// Until the upstream serves the proxy API (fleet-proxy not installed),
	// there is nothing to attach to; that is not a tunnel that is down.
	if err := a.waitForProxyAPI(ctx, up, cred, tokens); err != nil {
		return err
	}
	keys, err := access.UpstreamKeys(up)
	if err != nil {
		return err
	}
	audience := cred.ClusterNamespace + "/" + cred.ClusterName
	h, err := access.New(access.Options{
		Audience:    audience,
		Verifier:    assertion.NewVerifier(assertion.NewKeySet()),
		RefreshKeys: keys,
		Local:       rest.CopyConfig(a.opts.Local),
		Log:         log,
		Registerer:  replacing(a.opts.Registerer),
	})
	if err != nil {
		return err
	}
	attach, err := tunnel.AttachURL(cred.APIServerURL, cred.ClusterNamespace, cred.ClusterName)
	if err != nil {
		return err
	}
	tlsConfig, err := rest.TLSConfigFor(up)
	if err != nil {
		return fmt.Errorf("TLS configuration of the upstream: %w", err)
	}
	c := &tunnel.Client{
		URL: attach,
		// Each attempt reads the stored credential again: the leader renews
		// it, and a follower may have started long before.
		Token: func(ctx context.Context) (string, error) {
			now, err := readCredential(ctx, a.local, a.opts.Namespace)
			if err != nil {
				return "", err
			}
			if now == nil || !sameIdentity(now, cred) {
				return "", errIdentityChanged
			}
			tokens.set(now.Token)
			return now.Token, nil
		},
		TLS:     tlsConfig,
		Handler: h,
		Log:     log,
	}
	log.Info("opening the tunnel", "replica", a.opts.PodName)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return c.Run(gctx) })
	g.Go(func() error { return h.Run(gctx) })
	g.Go(func() error { return c.Watch(gctx, a.opts.TunnelDownLimit) })
	g.Go(func() error { return a.followCredential(gctx, cred, tokens) })
	return g.Wait()
}

// followCredential keeps tokens current from the stored credential and
// returns errIdentityChanged when it names another cluster or upstream.
func (a *Agent) followCredential(ctx context.Context, cred *credential, tokens *tokenSource) error {
	for {
		if err := sleepOrWake(ctx, a.opts.CredentialPoll, a.stored.next()); err != nil {
			return nil
		}
		now, err := readCredential(ctx, a.local, a.opts.Namespace)
		if err != nil {
			continue // a read that fails now is tried again; the tunnel stays
		}
		if now == nil || !sameIdentity(now, cred) {
			return errIdentityChanged
		}
		tokens.set(now.Token)
	}
}

// waitForProxyAPI returns once the upstream serves the proxy API group
// (its discovery document answers anything but 404), checking every
// minute and following the stored credential meanwhile.
func (a *Agent) waitForProxyAPI(ctx context.Context, up *rest.Config, cred *credential, tokens *tokenSource) error {
	hc, err := rest.HTTPClientFor(up)
	if err != nil {
		return err
	}
	url := up.Host + "/apis/" + tunnel.ProxyGroup + "/" + tunnel.ProxyVersion
	logged := false
	for {
		served, err := proxyAPIServed(ctx, hc, url)
		if served {
			return nil
		}
		wait := time.Minute
		if err != nil {
			wait = 10 * time.Second // the upstream is unreachable: sooner
		}
		if !logged {
			a.log.WithName("access").Info("the upstream serves no cluster-access API yet (fleet-proxy not installed or its APIService missing); checking again every minute",
				"api", tunnel.ProxyGroup+"/"+tunnel.ProxyVersion, "error", errString(err))
			logged = true
		}
		if err := sleep(ctx, wait); err != nil {
			return err
		}
		now, err := readCredential(ctx, a.local, a.opts.Namespace)
		if err == nil && (now == nil || !sameIdentity(now, cred)) {
			return errIdentityChanged
		}
		if err == nil {
			tokens.set(now.Token)
		}
	}
}

// proxyAPIServed asks for the group version's discovery document. 404 is
// "not served"; any other answer (503 while fleet-proxy is down included)
// means the APIService exists, and the tunnel's own retries take over.
func proxyAPIServed(ctx context.Context, hc *http.Client, url string) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false, err
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return false, nil
	}
	return true, nil
}

// sameIdentity reports whether two credentials are of the same Cluster on
// the same upstream (a renewal changes only the token and its times).
func sameIdentity(x, y *credential) bool {
	return x.ClusterNamespace == y.ClusterNamespace && x.ClusterName == y.ClusterName &&
		x.APIServerURL == y.APIServerURL && string(x.APIServerCA) == string(y.APIServerCA)
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// replacing returns a Registerer that registers a collector in place of
// an equal one already registered (the previous access session's), or nil
// when reg is nil.
func replacing(reg prometheus.Registerer) prometheus.Registerer {
	if reg == nil {
		return nil
	}
	return replacingRegisterer{reg}
}

type replacingRegisterer struct{ prometheus.Registerer }

func (r replacingRegisterer) Register(c prometheus.Collector) error {
	err := r.Registerer.Register(c)
	var already prometheus.AlreadyRegisteredError
	if errors.As(err, &already) {
		r.Registerer.Unregister(already.ExistingCollector)
		return r.Registerer.Register(c)
	}
	return err
}

func (r replacingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}
