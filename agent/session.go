package agent

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/registration"
	"github.com/gitops-fleet/fleet/internal/version"
)

// session is the agent's connection upstream under one credential.
type session struct {
	agent  *Agent
	tokens *tokenSource
	config *rest.Config // upstream, as the request identity (token rotates)
	up     client.WithWatch

	// mu guards cred: the renewal replaces it while the heartbeat, the
	// deployer and Agent.Registered read it.
	mu   sync.Mutex
	cred *credential
}

// current returns the session's credential. The credential is never
// modified (a renewal replaces it), so the caller may keep it.
func (s *session) current() *credential {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cred
}

var (
	errCredentialRejected = errors.New("the upstream rejected the agent's credential")
	errCredentialDeleted  = errors.New("the local fleet-agent credential was deleted (the agent was redeployed)")
)

func (a *Agent) newSession(ctx context.Context, cred *credential) (*session, error) {
	tokens := newTokenSource(cred.Token)
	// The credential pins the trust the bootstrap resolved: its CA when it
	// had one, the system store when the upstream is publicly trusted.
	mode := config.TLSModeStrict
	if len(cred.APIServerCA) == 0 {
		mode = config.TLSModeSystemStore
	}
	cfg, err := upstreamConfig(ctx, cred.APIServerURL, cred.APIServerCA, mode, tokens, nil)
	if err != nil {
		return nil, err
	}
	up, err := newUpstreamClient(cfg)
	if err != nil {
		return nil, err
	}
	return &session{agent: a, cred: cred, tokens: tokens, config: cfg, up: up}, nil
}

// check asks the upstream whether the credential still works: a read of the
// agent's own Cluster, the cheapest request it is allowed.
func (s *session) check(ctx context.Context) error {
	c := s.current()
	return s.up.Get(ctx, client.ObjectKey{Namespace: c.ClusterNamespace, Name: c.ClusterName}, &fleet.Cluster{})
}

// work runs the session's loops until one ends it.
func (a *Agent) work(ctx context.Context, cred *credential) error {
	s, err := a.newSession(ctx, cred)
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.session = s
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		a.session = nil
		a.mu.Unlock()
	}()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	loops := []func(context.Context, *session) error{
		func(ctx context.Context, s *session) error { return s.heartbeatLoop(ctx) },
		func(ctx context.Context, s *session) error { return s.renewLoop(ctx) },
		func(ctx context.Context, s *session) error { return s.watchCredential(ctx) },
	}
	loops = append(loops, a.workers...)
	errs := make(chan error, len(loops))
	for _, loop := range loops {
		go func() { errs <- loop(ctx, s) }()
	}
	err = <-errs
	cancel()
	for range len(loops) - 1 {
		<-errs
	}
	return err
}

// heartbeatLoop reports status.agent of the Cluster now and every
// CheckinInterval: one write per interval, no read. After a heartbeat
// (from the second on) it mints the recovery token when one is due.
func (s *session) heartbeatLoop(ctx context.Context) error {
	kubeVersion := ""
	if v, err := s.agent.kube.Discovery().ServerVersion(); err == nil {
		kubeVersion = v.GitVersion
	}
	t := time.NewTicker(s.agent.opts.CheckinInterval)
	defer t.Stop()
	for first := true; ; first = false {
		err := s.heartbeat(ctx, kubeVersion)
		switch {
		case err == nil && !first:
			// Not at the first heartbeat: the controller makes the
			// recovery identity of a new cluster when it sees that one.
			s.ensureRecoveryToken(ctx)
		case err == nil:
		case isRejected(err):
			return fmt.Errorf("%w: %v", errCredentialRejected, err)
		case ctx.Err() != nil:
			return ctx.Err()
		default:
			err = upstreamFault(err, s.config.Host, "heartbeat")
			s.agent.log.Error(err, "heartbeat failed; retrying at the next interval", "reason", faultReason(err))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// HeartbeatPatch is the merge patch of a Cluster's status that reports the
// agent's status: status.agent and nothing else (the admission policy
// fleet-cluster-status-agent lets an agent write no other field). fleet
// bench's light agents send it too.
func HeartbeatPatch(status fleet.AgentStatus) ([]byte, error) {
	return json.Marshal(map[string]any{"status": map[string]any{"agent": status}})
}

func (s *session) heartbeat(ctx context.Context, kubeVersion string) error {
	a := s.agent
	nodes := &corev1.NodeList{}
	var total, ready int32
	sample := ""
	if err := a.local.List(ctx, nodes); err == nil {
		for _, n := range nodes.Items {
			total++
			if sample == "" {
				sample = n.Name
			}
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
	}
	status := fleet.AgentStatus{
		LastSeen:                 metav1.Now(),
		Namespace:                a.opts.Namespace,
		Version:                  version.Version,
		KubernetesVersion:        kubeVersion,
		NodeCount:                total,
		ReadyNodeCount:           ready,
		SampleNode:               sample,
		Generation:               a.opts.Generation,
		HeartbeatIntervalSeconds: int32(a.opts.CheckinInterval / time.Second),
	}
	a.mu.Lock()
	if a.identityKey != nil {
		// Recorded on the Cluster when it records none (registered
		// before agents had a key).
		status.IdentityPublicKey = a.identityKey.PublicKey()
	}
	a.mu.Unlock()
	patch, err := HeartbeatPatch(status)
	if err != nil {
		return err
	}
	c := s.current()
	cluster := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: c.ClusterNamespace, Name: c.ClusterName}}
	return s.up.Status().Patch(ctx, cluster, client.RawPatch(types.MergePatchType, patch))
}

// renewLoop replaces the request token with a fresh one (same lifetime)
// once two thirds of its lifetime have passed, using the token itself.
func (s *session) renewLoop(ctx context.Context) error {
	for {
		c := s.current()
		lifetime := c.Expires.Sub(c.Issued)
		if c.Expires.IsZero() || c.Issued.IsZero() || lifetime <= 0 {
			<-ctx.Done()
			return ctx.Err()
		}
		renewAt := c.Issued.Add(lifetime * 2 / 3)
		if err := sleep(ctx, time.Until(renewAt)); err != nil {
			return err
		}
		if err := s.renew(ctx, lifetime); err != nil {
			if errors.Is(err, errCredentialDeleted) {
				return err
			}
			if isRejected(err) {
				return fmt.Errorf("%w: renewing the token: %v", errCredentialRejected, err)
			}
			s.agent.log.Error(err, "renewing the credential failed; retrying in a minute")
			if err := sleep(ctx, time.Minute); err != nil {
				return err
			}
		}
	}
}

func (s *session) renew(ctx context.Context, lifetime time.Duration) error {
	cur := s.current()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: cur.DeploymentNamespace, Name: cur.ServiceAccount}}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(lifetime / time.Second))}}
	if err := s.up.SubResource("token").Create(ctx, sa, tr); err != nil {
		return err
	}
	next := *cur
	next.Token = tr.Status.Token
	next.Issued = time.Now()
	next.Expires = tr.Status.ExpirationTimestamp.Time
	if err := replaceCredential(ctx, s.agent.local, s.agent.opts.Namespace, &next); err != nil {
		return fmt.Errorf("storing the renewed credential: %w", err)
	}
	s.agent.stored.fire()
	s.tokens.set(next.Token)
	s.mu.Lock()
	s.cred = &next
	s.mu.Unlock()
	s.agent.log.Info("credential renewed", "expires", next.Expires.UTC().Format(time.RFC3339))
	return nil
}

// watchCredential ends the session when the local credential is deleted: the
// controller does that when it redeploys the agent with a fresh bootstrap
// Secret, so the agent registers again.
//
// It also deletes a spent bootstrap Secret that appears while the
// credential stands: one that carries the import token this agent
// registered with. A push retried while the agent registered with the
// bootstrap Secret of its first try writes one; left there, it would keep
// an import token until the agent restarts. One watch of the names of the
// namespace's Secrets gives their events in the order the API server wrote
// them, and a redeploy deletes the credential before it writes the
// bootstrap Secret: the session has ended before it would see that one. A
// bootstrap Secret with another token (a person installing new values to
// register again) is left for the registration that follows the
// credential's deletion.
func (s *session) watchCredential(ctx context.Context) error {
	a := s.agent
	ns := client.InNamespace(a.opts.Namespace)
	for {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("SecretList"))
		if err := a.local.List(ctx, list, ns); err != nil {
			if err := sleep(ctx, time.Second); err != nil {
				return err
			}
			continue
		}
		var credential, bootstrap *metav1.PartialObjectMetadata
		for i := range list.Items {
			switch list.Items[i].Name {
			case registration.AgentCredentialSecretName:
				credential = &list.Items[i]
			case registration.BootstrapSecretName:
				bootstrap = &list.Items[i]
			}
		}
		if credential == nil {
			return errCredentialDeleted
		}
		if bootstrap != nil {
			s.deleteLeftoverBootstrap(ctx, bootstrap.UID)
		}
		from := &metav1.PartialObjectMetadataList{ListMeta: metav1.ListMeta{ResourceVersion: list.ResourceVersion}}
		from.SetGroupVersionKind(list.GroupVersionKind())
		w, err := a.local.Watch(ctx, from, ns)
		if err != nil {
			if err := sleep(ctx, time.Second); err != nil {
				return err
			}
			continue
		}
	events:
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				if apierrors.IsGone(apierrors.FromObject(ev.Object)) {
					break events
				}
				continue
			}
			m, ok := ev.Object.(*metav1.PartialObjectMetadata)
			switch {
			case !ok:
			case m.Name == registration.AgentCredentialSecretName && ev.Type == watch.Deleted:
				w.Stop()
				return errCredentialDeleted
			case m.Name == registration.BootstrapSecretName && (ev.Type == watch.Added || ev.Type == watch.Modified):
				s.deleteLeftoverBootstrap(ctx, m.UID)
			}
		}
		w.Stop()
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// deleteLeftoverBootstrap deletes the bootstrap Secret seen beside the
// working credential (that one only: uid) when it carries the import token
// this agent registered with.
func (s *session) deleteLeftoverBootstrap(ctx context.Context, uid types.UID) {
	a := s.agent
	key := client.ObjectKey{Namespace: a.opts.Namespace, Name: registration.BootstrapSecretName}
	boot := &corev1.Secret{}
	if err := a.local.Get(ctx, key, boot); err != nil || boot.UID != uid {
		return
	}
	a.mu.Lock()
	spent := a.spent
	a.mu.Unlock()
	token := strings.TrimSpace(string(boot.Data[registration.BootstrapKeyToken]))
	if token == "" || sha256.Sum256([]byte(token)) != spent {
		return
	}
	err := a.local.Delete(ctx, boot, client.Preconditions{UID: &uid})
	switch {
	case err == nil:
		a.log.Info("deleted a bootstrap Secret left over beside the working credential: it carries the import token the agent registered with", "secret", key.String())
	case apierrors.IsNotFound(err), apierrors.IsConflict(err), ctx.Err() != nil:
	default:
		a.log.Error(err, "could not delete the left-over bootstrap Secret; the agent deletes it when it connects again", "secret", key.String())
	}
}

// sleepOrWake is sleep that also ends when wake is closed (nil: never).
func sleepOrWake(ctx context.Context, d time.Duration, wake <-chan struct{}) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
	case <-wake:
	}
	return nil
}

// broadcast wakes every goroutine that took next before fire.
type broadcast struct {
	mu sync.Mutex
	ch chan struct{}
}

// next is closed by the next fire.
func (b *broadcast) next() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

func (b *broadcast) fire() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
}

// sleep waits for d, or returns ctx's error as soon as ctx ends.
func sleep(ctx context.Context, d time.Duration) error { return sleepOrWake(ctx, d, nil) }
