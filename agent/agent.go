package agent

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gitops-fleet/fleet/agent/deployer"
	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/apply"
	"github.com/gitops-fleet/fleet/internal/reconciler"
	"github.com/gitops-fleet/fleet/internal/registration"
)

// Agent is one running agent.
type Agent struct {
	opts  Options
	log   logr.Logger
	local client.WithWatch
	kube  kubernetes.Interface

	mu sync.Mutex
	// stuck is a state the agent cannot leave on its own (registration):
	// the message says what a person must do. It is reported as an event
	// and on /readyz.
	stuck     *reconciler.Stalled
	lastStuck string
	session   *session
	// identityKey is the agent's identity key (its heartbeat reports the
	// public key); recovery the token of its cluster's recovery identity
	// it holds, nil if none. Both are kept in the identity Secret.
	identityKey *registration.IdentityKey
	recovery    *recoveryCredential
	// spent is the SHA-256 of the import token this process last
	// registered with: a bootstrap Secret that carries it again is left
	// over (session.watchCredential).
	spent [sha256.Size]byte

	// workers run beside the heartbeat once the agent is registered (the
	// BundleDeployment deployer is one); each returns when its context ends
	// or with an error that ends the session.
	workers []func(ctx context.Context, s *session) error

	// stored wakes this process's access and direct sides when it writes
	// the stored credential, so the tunnel opens as soon as the agent
	// registers (other replicas read it every CredentialPoll).
	stored broadcast
}

// New checks the options and connects to the local cluster.
func New(opts Options) (*Agent, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	local, err := newClient(opts.Local)
	if err != nil {
		return nil, fmt.Errorf("connecting to the local cluster: %w", err)
	}
	kube, err := kubernetes.NewForConfig(opts.Local)
	if err != nil {
		return nil, err
	}
	a := &Agent{opts: opts, local: local, kube: kube, log: ctrl.Log.WithName("agent").WithValues("namespace", opts.Namespace)}
	if !opts.DisableDeployer {
		a.workers = append(a.workers, a.runDeployer)
	}
	return a, nil
}

// runDeployer applies the cluster's BundleDeployments (its own agent Bundle
// among them) for the life of the session.
func (a *Agent) runDeployer(ctx context.Context, s *session) error {
	cred := s.current()
	d, err := deployer.New(deployer.Options{
		Upstream:         s.config,
		Namespace:        cred.DeploymentNamespace,
		Local:            a.opts.Local,
		AgentNamespace:   a.opts.Namespace,
		ClusterName:      cred.ClusterName,
		ClusterNamespace: cred.ClusterNamespace,
		ResyncInterval:   a.opts.ResyncInterval,
	})
	if err != nil {
		return fmt.Errorf("starting the deployer: %w", err)
	}
	if err := d.Run(ctx); err != nil && ctx.Err() == nil {
		return fmt.Errorf("deployer: %w", err)
	}
	<-ctx.Done()
	return ctx.Err()
}

// Run runs the agent until ctx ends. With leader election, only the leader
// registers and works; losing leadership ends Run with an error so the
// process restarts as a follower. With Access, every replica holds a tunnel
// besides; a tunnel down for longer than TunnelDownLimit ends Run with an
// error too.
func (a *Agent) Run(ctx context.Context) error {
	if !a.opts.Access && !a.opts.Direct {
		return a.runElected(ctx)
	}
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return a.runElected(ctx) })
	if a.opts.Access {
		g.Go(func() error { return a.runAccess(ctx) })
	}
	if a.opts.Direct {
		g.Go(func() error { return a.runDirect(ctx) })
	}
	return g.Wait()
}

func (a *Agent) runElected(ctx context.Context) error {
	if !a.opts.LeaderElect {
		return a.run(ctx)
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: a.opts.Namespace, Name: "fleet-agent"},
		Client:     a.kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: a.opts.PodName},
	}
	var runErr error
	lost := false
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   a.opts.LeaseDuration,
		RenewDeadline:   a.opts.RenewDeadline,
		RetryPeriod:     a.opts.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            "fleet-agent",
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				a.log.Info("leading", "identity", a.opts.PodName)
				runErr = a.run(ctx)
			},
			OnStoppedLeading: func() { lost = ctx.Err() == nil },
		},
	})
	if err != nil {
		return err
	}
	le.Run(ctx)
	if lost {
		return errors.New("lost leadership of the fleet-agent Lease")
	}
	return runErr
}

// ReadyCheck fails while the agent is stuck, with the message that says what
// to do.
func (a *Agent) ReadyCheck(_ *http.Request) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stuck != nil {
		return a.stuck
	}
	return nil
}

// Registered returns the cluster the agent is registered as ("" if none).
func (a *Agent) Registered() (namespace, name string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.session == nil {
		return "", ""
	}
	c := a.session.current()
	return c.ClusterNamespace, c.ClusterName
}

// run connects (using the stored credential or registering), works until
// the credential is lost, and starts over, with backoff on failure.
func (a *Agent) run(ctx context.Context) error {
	// Beside the first connect, not before it: nothing there depends on it.
	var harden sync.WaitGroup
	harden.Add(1)
	go func() {
		defer harden.Done()
		a.hardenDefaultServiceAccount(ctx)
	}()
	defer harden.Wait()
	delay := time.Second
	for ctx.Err() == nil {
		cred, err := a.connect(ctx)
		if err != nil {
			a.report(ctx, err)
			select {
			case <-ctx.Done():
			case <-time.After(delay):
			}
			delay = min(2*delay, 5*time.Minute)
			continue
		}
		delay = time.Second
		a.report(ctx, nil)
		err = a.work(ctx, cred)
		if ctx.Err() != nil {
			break
		}
		if errors.Is(err, errCredentialDeleted) {
			a.log.Info("session ended; connecting again", "reason", err.Error())
		} else {
			a.log.Error(err, "session ended; connecting again")
		}
	}
	return nil
}

// connect returns a working credential: the stored one if the upstream
// still accepts it, otherwise a new one from registering (register).
func (a *Agent) connect(ctx context.Context) (*credential, error) {
	// The identity key exists before anything is registered or reported;
	// the stored credential is read meanwhile.
	var (
		cred  *credential
		err   error
		reads sync.WaitGroup
	)
	reads.Add(1)
	go func() {
		defer reads.Done()
		cred, err = readCredential(ctx, a.local, a.opts.Namespace)
	}()
	id, idErr := a.ensureIdentity(ctx)
	reads.Wait()
	if idErr != nil {
		return nil, idErr
	}
	a.mu.Lock()
	a.identityKey, a.recovery = id.key, id.recovery
	a.mu.Unlock()
	var unusable *unusableCredential
	switch {
	case errors.As(err, &unusable):
		a.log.Error(err, "stored credential unusable; registering again")
	case err != nil:
		// Not read, so not known to be unusable: a network fault must not
		// throw away a working credential.
		return nil, err
	}
	if cred != nil {
		s, err := a.newSession(ctx, cred)
		if err != nil {
			return nil, err
		}
		err = s.check(ctx)
		switch {
		case err == nil:
			// A bootstrap Secret beside a working credential is left over
			// from a registration interrupted after it stored the credential.
			boot := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: a.opts.Namespace, Name: registration.BootstrapSecretName}}
			if err := a.local.Delete(ctx, boot); err != nil && !apierrors.IsNotFound(err) {
				a.log.Error(err, "could not delete the leftover bootstrap Secret")
			}
			return cred, nil
		case isRejected(err):
			a.log.Info("the upstream rejects the stored credential; registering again", "reason", apierrors.ReasonForError(err))
		default:
			return nil, upstreamFault(err, cred.APIServerURL, "checking the stored credential")
		}
	}
	return a.register(ctx, id)
}

func isRejected(err error) bool { return apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err) }

// report records the agent's state: a stuck state is logged once, raised as
// an event and served on /readyz; other errors are logged.
func (a *Agent) report(ctx context.Context, err error) {
	var stuck *reconciler.Stalled
	a.mu.Lock()
	if errors.As(err, &stuck) {
		a.stuck = stuck
	} else {
		a.stuck = nil
	}
	repeat := err != nil && err.Error() == a.lastStuck
	if err != nil {
		a.lastStuck = err.Error()
	} else {
		a.lastStuck = ""
	}
	a.mu.Unlock()
	if err == nil || repeat {
		return
	}
	if stuck == nil {
		reason := faultReason(err)
		if reason == "" {
			a.log.Error(err, "registration attempt failed; retrying")
			return
		}
		a.log.Error(err, "agent cannot connect; retrying", "reason", reason)
		if reason != fleet.DownstreamAPIUnreachableReason {
			// An event needs the local API server.
			a.event(ctx, corev1.EventTypeWarning, reason, err.Error())
		}
		return
	}
	a.log.Error(err, "agent cannot register", "reason", stuck.Reason)
	a.event(ctx, corev1.EventTypeWarning, stuck.Reason, stuck.Message)
}

// event records a local event about the agent's pod (or namespace).
func (a *Agent) event(ctx context.Context, typ, reason, msg string) {
	ref := corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: a.opts.Namespace, Name: a.opts.PodName}
	pod := &corev1.Pod{}
	if err := a.local.Get(ctx, client.ObjectKey{Namespace: a.opts.Namespace, Name: a.opts.PodName}, pod); err == nil {
		ref.UID = pod.UID
	} else {
		// Not in a pod (tests, benchmarks): the agent's ConfigMap stands for it.
		ref = corev1.ObjectReference{APIVersion: "v1", Kind: "ConfigMap", Namespace: a.opts.Namespace, Name: registration.AgentConfigMapName}
	}
	now := metav1.Now()
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: a.opts.Namespace, GenerateName: "fleet-agent."},
		InvolvedObject: ref, Reason: reason, Message: msg, Type: typ,
		Source: corev1.EventSource{Component: "fleet-agent"}, FirstTimestamp: now, LastTimestamp: now, Count: 1,
		ReportingController: "fleet.cattle.io/agent", ReportingInstance: a.opts.PodName,
	}
	if err := a.local.Create(ctx, ev); err != nil {
		a.log.Error(err, "could not record event", "reason", reason)
	}
}

// hardenDefaultServiceAccount turns off token automounting for the agent
// namespace's default ServiceAccount: only the agent needs a token there.
// The chart cannot own that object (the namespace makes it before helm
// install runs), so the agent sets the one field, with server-side apply.
func (a *Agent) hardenDefaultServiceAccount(ctx context.Context) {
	sa := &unstructured.Unstructured{}
	sa.SetAPIVersion("v1")
	sa.SetKind("ServiceAccount")
	sa.SetNamespace(a.opts.Namespace)
	sa.SetName("default")
	if err := unstructured.SetNestedField(sa.Object, false, "automountServiceAccountToken"); err != nil {
		return
	}
	if err := a.local.Patch(ctx, sa, client.Apply, client.FieldOwner(apply.FieldManager), client.ForceOwnership); err != nil {
		a.log.Error(err, "could not turn off token automounting of the default ServiceAccount")
	}
}
