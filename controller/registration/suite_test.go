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
	"github.com/gitops-fleet/fleet/dev/controlplane"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/registration"
)

// pickupTimeout is the credential pickup timeout of the controller under
// test, short so its expiry can be watched.
const pickupTimeout = 8 * time.Second

// isolatedEnv, when set, makes this test binary run without the shared
// controller: only the ClusterRegistrationToken controller runs in the
// background, and the tests start (and kill) registration controllers of
// their own. TestGrant_ControllerRestartAtEveryWriteConverges re-runs the
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
	// recoveryNS, when set, registers as the recovery identity of that
	// cluster namespace does: its label instead of a token's.
	recoveryNS string
	// unsealed: register as an agent of an earlier version did, without a
	// key (the credential comes back in the clear) and unsigned.
	unsealed bool
	// identity signs its registrations, as the real agent's identity key
	// does (kept across registrations; nil: unsigned).
	identity *registration.IdentityKey
	mu       sync.Mutex
	keys     map[string]*registration.CredentialKey // by registration name
}

func newAgent(t *testing.T, ws, tokenName, bearer string) *agent {
	t.Helper()
	k, err := registration.NewIdentityKey()
	if err != nil {
		t.Fatal(err)
	}
	return &agent{ws: ws, tokenName: tokenName, importer: as(t, bearer), identity: k}
}

// register creates a ClusterRegistration as the import identity and waits
// for the grant as the agent does. It returns the registration and the
// credential as the agent keeps it (credentialOf).
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
			Namespace: a.ws,
			// As the real agent does: a random name only it knows.
			Name:   randomName(),
			Labels: a.labels(),
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
		if a.identity != nil {
			// ... and signed with its identity key.
			if err := a.identity.Sign(reg); err != nil {
				t.Fatal(err)
			}
		}
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

// labels are the labels of the agent's registrations: its token's, or its
// recovery namespace's.
func (a *agent) labels() map[string]string {
	if a.recoveryNS != "" {
		return map[string]string{fleet.RecoveryNamespaceLabel: a.recoveryNS}
	}
	return map[string]string{fleet.RegistrationTokenLabel: a.tokenName}
}

// waitCredential waits for the credential as the import identity.
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
// goroutine. It asks as the real agent does: a registration with a key is
// read by its name until its status holds the sealed credential, which is
// opened; an older agent's credential Secret is read by its name
// (Forbidden until the grant made its Role; NotFound until it is written).
// It returns the credential as a Secret whose data keys are in the clear:
// an older agent's Secret as upstream has it, or, for a sealed one, what
// opened, named after the registration.
func (a *agent) watchCredential(ctx context.Context, reg *fleet.ClusterRegistration) (*corev1.Secret, error) {
	name := registration.CredentialSecretName(reg.Spec.ClientID, reg.Spec.ClientRandom)
	a.mu.Lock()
	key := a.keys[reg.Name]
	a.mu.Unlock()
	var lastErr error
	for ctx.Err() == nil {
		if a.unsealed {
			s := &corev1.Secret{}
			err := a.importer.Get(ctx, client.ObjectKey{Namespace: config.DefaultSystemRegistrationNS, Name: name}, s)
			switch {
			case err == nil && len(s.Data[registration.KeyToken]) > 0:
				remember(string(s.Data[registration.KeyToken]))
				return s, nil
			case err != nil && !apierrors.IsForbidden(err) && !apierrors.IsNotFound(err):
				return nil, fmt.Errorf("reading credential Secret %s: %w", name, err)
			}
			lastErr = err
		} else {
			got := &fleet.ClusterRegistration{}
			err := a.importer.Get(ctx, client.ObjectKeyFromObject(reg), got)
			switch {
			case err == nil && len(got.Status.Credential) > 0:
				c, err := key.Open(got.Status.Credential, got.Namespace, got.Name, string(got.UID))
				if err != nil {
					return nil, fmt.Errorf("opening the credential of ClusterRegistration %s: %w", got.Name, err)
				}
				remember(c.Token)
				return credentialOf(got, c), nil
			case err != nil:
				return nil, fmt.Errorf("reading ClusterRegistration %s as the import identity: %w", reg.Name, err)
			}
			lastErr = fmt.Errorf("status %+v", got.Status)
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil, fmt.Errorf("no credential for ClusterRegistration %s (last: %v)", reg.Name, lastErr)
}

// credentialOf is an opened credential as the agent keeps it: a Secret
// whose data keys are in the clear, named after the registration (it
// exists nowhere upstream).
func credentialOf(reg *fleet.ClusterRegistration, c *registration.SealedCredential) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: reg.Namespace, Name: reg.Name},
		Data:       c.SecretData(),
	}
}

// pickedUp does what the agent does once it has the credential: an older
// agent deletes its clear credential Secret as the import identity; a
// sealed one stays in the registration's status.
func (a *agent) pickedUp(t *testing.T, secret *corev1.Secret) {
	t.Helper()
	if !a.unsealed {
		return
	}
	if err := a.importer.Delete(t.Context(), secret); err != nil {
		t.Fatalf("deleting the clear credential Secret as the import identity: %v", err)
	}
}

// randomName is a registration name as the agent makes it: request- and
// 128 random bits.
func randomName() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return "request-" + hex.EncodeToString(b)
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

// registerSealed registers as the real agent does: with a key of its own
// and a random name, reading the registration by its name until its status
// holds the credential, and opening it. It returns the registration as the
// import identity read it, and what opened.
func (a *agent) registerSealed(t *testing.T, clientID string) (*fleet.ClusterRegistration, *registration.SealedCredential) {
	t.Helper()
	reg := a.create(t, clientID, nil)
	got := &fleet.ClusterRegistration{}
	testenv.Eventually(t, 30*time.Second, "the sealed credential in the registration's status, read by name as the import identity", func() error {
		if err := a.importer.Get(t.Context(), client.ObjectKeyFromObject(reg), got); err != nil {
			return err
		}
		if len(got.Status.Credential) == 0 {
			return fmt.Errorf("status %+v", got.Status)
		}
		return nil
	})
	a.mu.Lock()
	key := a.keys[reg.Name]
	a.mu.Unlock()
	cred, err := key.Open(got.Status.Credential, got.Namespace, got.Name, string(got.UID))
	if err != nil {
		t.Fatalf("opening the credential as the agent that asked: %v", err)
	}
	remember(cred.Token)
	return got, cred
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
