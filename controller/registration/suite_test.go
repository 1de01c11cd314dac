package registration_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"k8s.io/apimachinery/pkg/types"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller"
	"github.com/gitops-fleet/fleet/controller/token"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/dev/controlplane"
	"github.com/gitops-fleet/fleet/internal/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/registration"
)

// pickupTimeout is the credential pickup timeout of the controller under
// test, short so its expiry can be watched.
const pickupTimeout = 8 * time.Second

// isolatedEnv, when set, makes this test binary run without the shared
// controller: only the ClusterRegistrationToken controller runs in the
// background, and the tests start (and kill) registration controllers of
// their own. TestGrant_ControllerRestartAtEveryStepConverges re-runs the
// binary so; the other tests need the shared controller.
const isolatedEnv = "FLEET_REGISTRATION_TEST_ISOLATED"

// isolated reports that the binary runs without the shared controller.
var isolated = os.Getenv(isolatedEnv) != ""

// controllerConfig is the controller configuration of the tests.
func controllerConfig() *config.Config {
	return &config.Config{
		APIServerURL: "https://upstream.example.com:6443", APIServerCA: []byte("upstream-ca"),
		// The local cluster has a suite of its own (controller/bootstrap).
		Bootstrap: config.Bootstrap{Enabled: ptr.To(false)},
	}
}

var (
	env *controlplane.Env
	up  client.Client
	// shared is the controller of the tests (nil in an isolated run);
	// probeAddress serves its /healthz and /readyz.
	shared       *controller.Controller
	probeAddress string
	// logs holds everything the controller logged, so tests can prove no
	// bearer token reaches a log.
	logs *testenv.Logs
	// bearers collects every bearer token the tests saw.
	bearers struct {
		sync.Mutex
		tokens []string
	}
)

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.Options{ControlPlanes: &controlplane.Options{}, CaptureLogs: true}, setup)
}

// setup starts the controller the tests share, or, in an isolated run, the
// ClusterRegistrationToken controller alone.
func setup(s *testenv.Suite) error {
	env, up, logs = s.Env, s.Env.Upstream.Client, s.Logs
	if isolated {
		mgr, err := newTokenManager()
		if err != nil {
			return err
		}
		s.Go("token controller", mgr.Start)
		return nil
	}
	// The controller runs with exactly the rights charts/fleet gives it:
	// every Role it grants must be one it may grant.
	identity, err := env.Upstream.FleetControllerIdentity(s.Context(), config.DefaultSystemNamespace)
	if err != nil {
		return err
	}
	if probeAddress, err = freeAddress(); err != nil {
		return err
	}
	shared, err = controller.New(s.Context(), controller.Options{
		RestConfig:              identity,
		InitialConfig:           controllerConfig(),
		MetricsAddress:          "0",
		ProbeAddress:            probeAddress,
		CredentialPickupTimeout: pickupTimeout,
		AdmissionPolicyResync:   5 * time.Second,
	})
	if err != nil {
		return err
	}
	s.Go("controller", shared.Start)
	return nil
}

// freeAddress returns a loopback address with a port nobody listens on.
func freeAddress() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func remember(bearer string) {
	bearers.Lock()
	defer bearers.Unlock()
	bearers.tokens = append(bearers.tokens, bearer)
}

func randomID(prefix string) string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// importToken makes a ClusterRegistrationToken (bound to clientID when set)
// and returns the import bearer token from its values Secret, as a person
// installing the agent would.
func importToken(t *testing.T, ws, name, clientID string) string {
	t.Helper()
	return tokenWith(t, ws, name, fleet.ClusterRegistrationTokenSpec{ClientID: clientID})
}

// tokenWith makes a ClusterRegistrationToken with spec and returns the
// import bearer token from its values Secret.
func tokenWith(t *testing.T, ws, name string, spec fleet.ClusterRegistrationTokenSpec) string {
	t.Helper()
	tok := &fleet.ClusterRegistrationToken{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: name}, Spec: spec}
	if err := up.Create(t.Context(), tok); err != nil {
		t.Fatal(err)
	}
	var bearer string
	testenv.Eventually(t, 30*time.Second, "values Secret of token "+ws+"/"+name, func() error {
		if err := up.Get(t.Context(), client.ObjectKeyFromObject(tok), tok); err != nil {
			return err
		}
		if tok.Status.SecretName == "" {
			return errors.New("no status.secretName yet")
		}
		s := &corev1.Secret{}
		if err := up.Get(t.Context(), client.ObjectKey{Namespace: ws, Name: tok.Status.SecretName}, s); err != nil {
			return err
		}
		if bearer = token.Bearer(s); bearer == "" {
			return errors.New("no token in values")
		}
		return nil
	})
	remember(bearer)
	return bearer
}

// identity is a client acting as one bearer token.
type identity struct {
	client.WithWatch
	cs kubernetes.Interface
}

func as(t *testing.T, bearer string) identity {
	t.Helper()
	cfg := env.Upstream.ConfigForToken(bearer)
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: controlplane.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return identity{WithWatch: c, cs: cs}
}

// agent simulates the registering side of the handshake with an import
// identity.
type agent struct {
	ws, tokenName string
	importer      identity
	// unsealed: register as an agent of an earlier version did, without a
	// key (the credential comes back in the clear).
	unsealed bool
	mu       sync.Mutex
	keys     map[string]*registration.CredentialKey // by registration name
}

func newAgent(t *testing.T, ws, tokenName, bearer string) *agent {
	return &agent{ws: ws, tokenName: tokenName, importer: as(t, bearer)}
}

// register creates a ClusterRegistration as the import identity and waits,
// watching the credential Secret with a field selector as the agent does,
// until the grant. It returns the registration and the Secret.
func (a *agent) register(t *testing.T, clientID string, labels map[string]string) (*fleet.ClusterRegistration, *corev1.Secret) {
	t.Helper()
	reg := a.create(t, clientID, labels)
	secret := a.waitCredential(t, reg, 30*time.Second)
	return reg, secret
}

func (a *agent) create(t *testing.T, clientID string, labels map[string]string) *fleet.ClusterRegistration {
	t.Helper()
	key, err := registration.NewCredentialKey()
	if err != nil {
		t.Fatal(err)
	}
	reg := &fleet.ClusterRegistration{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:    a.ws,
			GenerateName: "request-",
			Labels:       map[string]string{fleet.RegistrationTokenLabel: a.tokenName},
			// As the real agent does: its request time orders requests made
			// within one second.
			Annotations: map[string]string{registration.RequestedAtAnnotation: time.Now().UTC().Format(time.RFC3339Nano)},
		},
		Spec: fleet.ClusterRegistrationSpec{ClientID: clientID, ClientRandom: randomID("random-"), ClusterLabels: labels},
	}
	if !a.unsealed {
		// As the real agent does: a key of its own, and the finalizer.
		reg.Spec.CredentialPublicKey = key.PublicKey()
		reg.Finalizers = []string{registration.RegistrationFinalizer}
	}
	if err := a.importer.Create(t.Context(), reg); err != nil {
		t.Fatalf("creating ClusterRegistration as the import identity: %v", err)
	}
	a.mu.Lock()
	if a.keys == nil {
		a.keys = map[string]*registration.CredentialKey{}
	}
	a.keys[reg.Name] = key
	a.mu.Unlock()
	return reg
}

// waitCredential watches the credential Secret as the import identity:
// Forbidden until the grant made the Role that lets it read the Secret.
func (a *agent) waitCredential(t *testing.T, reg *fleet.ClusterRegistration, timeout time.Duration) *corev1.Secret {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	s, err := a.watchCredential(ctx, reg)
	if err != nil {
		t.Fatalf("after %s: %v", timeout, err)
	}
	return s
}

// watchCredential is waitCredential until ctx ends, for use off the test's
// goroutine. It reads the credential Secret by name as the real agent does
// (Forbidden, for an unsealed registration, until the grant made its Role;
// NotFound until it is written) and returns it as the agent keeps it: a
// sealed one opened, its keys in the clear (labels and type as upstream).
func (a *agent) watchCredential(ctx context.Context, reg *fleet.ClusterRegistration) (*corev1.Secret, error) {
	name := registration.CredentialSecretName(reg.Spec.ClientID, reg.Spec.ClientRandom)
	a.mu.Lock()
	key := a.keys[reg.Name]
	a.mu.Unlock()
	var lastErr error
	for ctx.Err() == nil {
		s := &corev1.Secret{}
		err := a.importer.Get(ctx, client.ObjectKey{Namespace: config.DefaultSystemRegistrationNS, Name: name}, s)
		switch {
		case err == nil && len(s.Data[registration.KeySealed]) > 0:
			c, err := key.Open(s.Data[registration.KeySealed], reg.Namespace, reg.Name, string(reg.UID))
			if err != nil {
				return nil, fmt.Errorf("opening credential Secret %s: %w", name, err)
			}
			remember(c.Token)
			s.Data = map[string][]byte{
				registration.KeyToken:               []byte(c.Token),
				registration.KeyClusterNamespace:    []byte(c.ClusterNamespace),
				registration.KeyClusterName:         []byte(c.ClusterName),
				registration.KeyDeploymentNamespace: []byte(c.DeploymentNamespace),
				registration.KeyServiceAccount:      []byte(c.ServiceAccount),
				registration.KeyExpires:             []byte(c.Expires),
			}
			return s, nil
		case err == nil && len(s.Data[registration.KeyToken]) > 0:
			remember(string(s.Data[registration.KeyToken]))
			return s, nil
		case err != nil && !apierrors.IsForbidden(err) && !apierrors.IsNotFound(err):
			return nil, fmt.Errorf("reading credential Secret %s: %w", name, err)
		}
		lastErr = err
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil, fmt.Errorf("no credential Secret %s (last error: %v)", name, lastErr)
}

// pickedUp does what the agent does with the credential Secret once it has
// it: a sealed one stays (only the agent's key opens it, and the controller
// removes it with the registration); a clear one of an older agent is
// deleted as the import identity.
func (a *agent) pickedUp(t *testing.T, secret *corev1.Secret) {
	t.Helper()
	if !a.unsealed {
		return
	}
	if err := a.importer.Delete(t.Context(), secret); err != nil {
		t.Fatalf("deleting the clear credential Secret as the import identity: %v", err)
	}
}

// credentialPayload is what a credential Secret hands over: the sealed box,
// or an older agent's clear token.
func credentialPayload(s *corev1.Secret) []byte {
	if b := s.Data[registration.KeySealed]; len(b) > 0 {
		return b
	}
	return s.Data[registration.KeyToken]
}

func getReg(t *testing.T, ws, name string) *fleet.ClusterRegistration {
	t.Helper()
	reg := &fleet.ClusterRegistration{}
	if err := up.Get(t.Context(), client.ObjectKey{Namespace: ws, Name: name}, reg); err != nil {
		t.Fatal(err)
	}
	return reg
}

// waitCondition waits for the registration's Granted condition with status
// and reason.
func waitCondition(t *testing.T, ws, name string, status metav1.ConditionStatus, reason string) *fleet.ClusterRegistration {
	t.Helper()
	reg := &fleet.ClusterRegistration{}
	testenv.Eventually(t, 30*time.Second, fmt.Sprintf("ClusterRegistration %s/%s Granted=%s reason %s", ws, name, status, reason), func() error {
		if err := up.Get(t.Context(), client.ObjectKey{Namespace: ws, Name: name}, reg); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(reg.Status.Conditions, fleet.GrantedCondition)
		if cond == nil || cond.Status != status || cond.Reason != reason {
			return fmt.Errorf("status %+v", reg.Status)
		}
		return nil
	})
	return reg
}

// counts are the registrations of a workspace and the objects made for
// them.
type counts struct{ registrations, serviceAccounts, roles, roleBindings, secrets int }

// countGenerated counts the registrations of workspace ws and, in every
// namespace, the objects labelled for them. Secrets are listed with the
// uncached admin client.
func countGenerated(t *testing.T, ws string) counts {
	t.Helper()
	sel := client.MatchingLabels{registration.RegistrationNamespaceLabel: ws}
	var c counts
	regs := &fleet.ClusterRegistrationList{}
	sas := &corev1.ServiceAccountList{}
	secrets := &corev1.SecretList{}
	for _, l := range []client.ObjectList{sas, secrets} {
		if err := up.List(t.Context(), l, sel); err != nil {
			t.Fatal(err)
		}
	}
	if err := up.List(t.Context(), regs, client.InNamespace(ws)); err != nil {
		t.Fatal(err)
	}
	c.registrations, c.serviceAccounts, c.secrets = len(regs.Items), len(sas.Items), len(secrets.Items)
	c.roles, c.roleBindings = countRBAC(t, sel)
	return c
}

// waitEvent waits for an event with reason (and a note containing noteHas)
// on the named registration.
func waitEvent(t *testing.T, ws, name, reason, noteHas string) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, fmt.Sprintf("event %s on ClusterRegistration %s/%s", reason, ws, name), func() error {
		list := &eventsv1.EventList{}
		if err := up.List(t.Context(), list, client.InNamespace(ws)); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Regarding.Kind == "ClusterRegistration" && e.Regarding.Name == name && e.Reason == reason && strings.Contains(e.Note, noteHas) {
				return nil
			}
		}
		return fmt.Errorf("%d events, none matching", len(list.Items))
	})
}

// registerSealed registers as the real agent does: with a key of its own,
// reading the credential Secret by name (its only right on Secrets) until
// it appears, and opening it. It returns the registration, the Secret as
// the import identity read it, and what opened.
func (a *agent) registerSealed(t *testing.T, clientID string) (*fleet.ClusterRegistration, *corev1.Secret, *registration.SealedCredential) {
	t.Helper()
	key, err := registration.NewCredentialKey()
	if err != nil {
		t.Fatal(err)
	}
	reg := &fleet.ClusterRegistration{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: a.ws, GenerateName: "request-",
			Labels:      map[string]string{fleet.RegistrationTokenLabel: a.tokenName},
			Annotations: map[string]string{registration.RequestedAtAnnotation: time.Now().UTC().Format(time.RFC3339Nano)},
			Finalizers:  []string{registration.RegistrationFinalizer},
		},
		Spec: fleet.ClusterRegistrationSpec{ClientID: clientID, ClientRandom: randomID("random-"), CredentialPublicKey: key.PublicKey()},
	}
	if err := a.importer.Create(t.Context(), reg); err != nil {
		t.Fatalf("creating ClusterRegistration as the import identity: %v", err)
	}
	name := registration.CredentialSecretName(clientID, reg.Spec.ClientRandom)
	secret := &corev1.Secret{}
	testenv.Eventually(t, 30*time.Second, "the credential Secret, read by name as the import identity", func() error {
		return a.importer.Get(t.Context(), client.ObjectKey{Namespace: config.DefaultSystemRegistrationNS, Name: name}, secret)
	})
	cred, err := key.Open(secret.Data[registration.KeySealed], reg.Namespace, reg.Name, string(reg.UID))
	if err != nil {
		t.Fatalf("opening the credential as the agent that asked: %v", err)
	}
	remember(cred.Token)
	return reg, secret, cred
}

// checkIn sends an agent's first heartbeat (status.agent, as the agent
// patches it) as the request identity of the credential secret, and waits
// for the controller's first status of the Cluster, which waits for that
// check-in.
func checkIn(t *testing.T, secret *corev1.Secret) {
	t.Helper()
	ws, name := string(secret.Data[registration.KeyClusterNamespace]), string(secret.Data[registration.KeyClusterName])
	patch := []byte(`{"status":{"agent":{"lastSeen":"` + time.Now().UTC().Format(time.RFC3339) + `","namespace":"cattle-fleet-system"}}}`)
	c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: name}}
	if err := as(t, string(secret.Data[registration.KeyToken])).Status().Patch(t.Context(), c, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatalf("the agent's check-in: %v", err)
	}
	testenv.Eventually(t, 30*time.Second, "the Cluster's first status after the check-in", func() error {
		if err := up.Get(t.Context(), client.ObjectKeyFromObject(c), c); err != nil {
			return err
		}
		if c.Status.Namespace == "" {
			return errors.New("no status.namespace yet")
		}
		return nil
	})
}
