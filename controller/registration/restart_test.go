package registration_test

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller/admission"
	"github.com/gitops-fleet/fleet/controller/configstore"
	ctrlreg "github.com/gitops-fleet/fleet/controller/registration"
	"github.com/gitops-fleet/fleet/controller/token"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/registration"
)

// restartPickupTimeout is the credential pickup timeout of the restart
// test's controllers: short, so the test can wait for the state a
// registration settles in (the credential Secret and the access to it
// gone).
const restartPickupTimeout = 3 * time.Second

// newTokenManager is the background manager of an isolated run: the
// ClusterRegistrationToken controller alone, so tests get import tokens.
func newTokenManager() (ctrl.Manager, error) {
	mgr, err := ctrl.NewManager(env.Upstream.Config, testenv.ManagerOptions(nil))
	if err != nil {
		return nil, err
	}
	err = (&token.Reconciler{
		Client:    mgr.GetClient(),
		Config:    configstore.New(config.DefaultSystemNamespace, config.ConfigMapName, controllerConfig()),
		Clientset: env.Upstream.Clientset,
		Recorder:  mgr.GetEventRecorder("fleet-controller"),
	}).SetupWithManager(mgr)
	return mgr, err
}

// grantController is one controller process as far as registrations go: a
// manager of its own running a new ClusterRegistration Reconciler (no state
// shared with any earlier one), on a connection the test watches (writes).
type grantController struct {
	cancel context.CancelFunc
	run    *testenv.Runner
	// elected is closed once the manager's caches synced and its
	// controllers started.
	elected <-chan struct{}
	writes  *writeLog
}

// startGrantController starts a registration controller. With killAt > 0,
// the killAt-th write it makes ends it right after that write returned:
// the manager's context ends and no later request of the process reaches
// the API server, as a killed process would.
func startGrantController(t *testing.T, killAt int) *grantController {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	g := &grantController{cancel: cancel, writes: newWriteLog(killAt, cancel)}
	cfg := g.writes.config(env.Upstream.Config)
	mgr, err := ctrl.NewManager(cfg, testenv.ManagerOptions(ctx))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	clientset, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	checker, err := admission.New(mgr.GetCache(), admission.Options{})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if err := mgr.Add(checker); err != nil {
		cancel()
		t.Fatal(err)
	}
	r := &ctrlreg.Reconciler{
		Admission:               checker,
		Client:                  mgr.GetClient(),
		Config:                  configstore.New(config.DefaultSystemNamespace, config.ConfigMapName, controllerConfig()),
		Clientset:               clientset,
		Recorder:                mgr.GetEventRecorder("fleet-controller"),
		CredentialPickupTimeout: restartPickupTimeout,
	}
	if err := r.SetupWithManager(ctx, mgr); err != nil {
		cancel()
		t.Fatal(err)
	}
	g.elected = mgr.Elected()
	g.run = testenv.Go(ctx, "registration controller", mgr.Start)
	t.Cleanup(func() { g.stop(t) })
	return g
}

// stop ends the manager and waits for it to return. It first lets the
// manager finish starting: controller-runtime's manager does not return
// when it is stopped while its caches are still starting (it keeps waiting
// for them to report ready), which a grant that converges within
// milliseconds of the start would otherwise hit.
func (g *grantController) stop(t *testing.T) {
	t.Helper()
	select {
	case <-g.elected:
	case <-g.run.Done():
	case <-time.After(60 * time.Second):
		t.Error("registration controller did not finish starting within 60s")
	}
	g.cancel()
	g.wait(t)
}

func (g *grantController) wait(t *testing.T) {
	t.Helper()
	if err := g.run.Wait(60 * time.Second); err != nil {
		t.Error(err)
	}
}

// waitKilledOrGranted waits until the controller was killed at its
// killAt-th write (true; the manager returned), or granted reg with fewer
// writes (false).
func (g *grantController) waitKilledOrGranted(t *testing.T, reg *fleet.ClusterRegistration) bool {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-g.writes.killed:
			g.wait(t)
			return true
		case <-g.run.Done():
			t.Fatalf("controller manager returned before its write %d: %v", g.writes.killAt, g.run.Err())
		case <-time.After(50 * time.Millisecond):
		}
		if writes := g.writes.seen(); slices.ContainsFunc(writes, func(w write) bool { return w.grants && w.name == reg.Name }) {
			if len(writes) < g.writes.killAt {
				return false
			}
			// The grant's last write was the killAt-th: the kill is
			// under way.
			select {
			case <-g.writes.killed:
				g.wait(t)
				return true
			case <-time.After(10 * time.Second):
				t.Fatalf("write %d reached the API server, but the controller was not killed", g.writes.killAt)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("neither write %d nor the grant within 60s (writes: %v)", g.writes.killAt, g.writes.seen())
		}
	}
}

// TestGrant_ControllerRestartAtEveryWriteConverges kills the registration
// controller right after each write a grant makes (n = 1, 2, … until a
// grant completes in fewer writes: whatever the grant writes is covered),
// starts a new one, and checks that nothing after the kill happened and
// that the registration completes with exactly one Cluster, one
// registration and one request identity, and nothing left for any other
// registration: both when the agent keeps waiting for its registration,
// and when it gave up (its watch timed out) and registers anew.
//
// Only one registration controller may run at a time, and the shared
// controller of this binary reconciles every namespace, so the test runs in
// a second process of this test binary, with control planes of its own and
// without the shared controller (isolatedEnv).
func TestGrant_ControllerRestartAtEveryWriteConverges(t *testing.T) {
	if !isolated {
		runIsolated(t)
		return
	}
	for _, variant := range []struct {
		name       string
		reregister bool
	}{{"same-registration", false}, {"new-registration", true}} {
		t.Run(variant.name, func(t *testing.T) {
			for n := 1; ; n++ {
				var grant []write
				if !t.Run(fmt.Sprintf("write-%d", n), func(t *testing.T) { grant = restartAt(t, n, variant.reregister) }) {
					return
				}
				if grant != nil {
					t.Logf("a grant makes %d writes:\n  %s", len(grant), strings.Join(stringsOf(grant), "\n  "))
					if n < 2 {
						t.Errorf("a grant of %d writes: the test killed the controller at none", len(grant))
					}
					return
				}
				if n >= 50 {
					t.Fatalf("still killing at write %d: a grant never ends?", n)
				}
			}
		})
	}
}

// restartAt kills the first controller at its n-th write (if the grant
// makes that many), checks what the writes before the kill left, and
// checks that a second controller completes the registration. It returns
// the first controller's writes when it granted without a kill.
func restartAt(t *testing.T, n int, reregister bool) []write {
	begin := time.Now()
	ws := testenv.Namespace(t, up, "fleet-ws-")
	a := newAgent(t, ws, "tok", importToken(t, ws, "tok", ""))
	clientID := randomID("cid-")
	labels := map[string]string{"env": "restart"}

	first := startGrantController(t, n)
	reg := a.create(t, clientID, labels)
	type answer struct {
		secret *corev1.Secret
		err    error
	}
	answers := make(chan answer, 1)
	if !reregister {
		// The agent watches for its answer while the controller dies and
		// comes back.
		go func() {
			ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
			defer cancel()
			s, err := a.watchCredential(ctx, reg)
			answers <- answer{s, err}
		}()
	}
	killed := first.waitKilledOrGranted(t, reg)
	took := time.Since(begin)
	writes := first.writes.seen()
	if killed {
		t.Logf("killed after write %d, %s (writes: %v)", n, writes[n-1], writes)
	} else {
		t.Logf("granted in %d writes, no kill", len(writes))
		first.stop(t)
	}

	// What the writes before the kill made exists, and nothing else.
	written := func(f func(write) bool) bool { return slices.ContainsFunc(writes, f) }
	secretKey := client.ObjectKey{Namespace: config.DefaultSystemRegistrationNS, Name: registration.CredentialSecretName(clientID, reg.Spec.ClientRandom)}
	err := up.Get(t.Context(), secretKey, &corev1.Secret{})
	switch created := written(func(w write) bool { return w.verb == "create" && w.resource == "secrets" && w.name == secretKey.Name }); {
	case !created && !apierrors.IsNotFound(err):
		t.Fatalf("credential Secret after a kill at write %d: want NotFound, got %v", n, err)
	case created && err != nil && !apierrors.IsNotFound(err):
		// (NotFound: the agent already picked it up and deleted it.)
		t.Fatalf("credential Secret after a kill at write %d: %v", n, err)
	}
	clusters := &fleet.ClusterList{}
	if err := up.List(t.Context(), clusters, client.InNamespace(ws)); err != nil {
		t.Fatal(err)
	}
	if created := written(func(w write) bool { return w.verb == "create" && w.resource == "clusters" && w.namespace == ws }); created != (len(clusters.Items) == 1) || len(clusters.Items) > 1 {
		t.Fatalf("after a kill at write %d: the Cluster's create written: %v, but %d Clusters in %s", n, created, len(clusters.Items), ws)
	}
	regNow := getReg(t, ws, reg.Name)
	switch {
	case written(func(w write) bool { return w.grants && w.name == reg.Name }):
		if !regNow.Status.Granted {
			t.Fatalf("not granted after the grant's status write (kill at write %d): %+v", n, regNow.Status)
		}
	case !written(func(w write) bool {
		return w.resource == "clusterregistrations" && w.subresource == "status" && w.name == reg.Name
	}):
		if regNow.Status.Granted || len(regNow.Status.Conditions) > 0 || len(regNow.Status.Credential) > 0 {
			t.Fatalf("status without a status write (kill at write %d): %+v", n, regNow.Status)
		}
	case regNow.Status.Granted:
		t.Fatalf("granted without a granting status write (kill at write %d): %+v", n, regNow.Status)
	}

	second := startGrantController(t, 0)
	final := reg
	if reregister {
		// The agent saw nothing (it restarted) and registers again at
		// once with a new clientRandom, usually within the same second:
		// the requested-at annotation orders the two, and the new one
		// supersedes the first whatever order the controller sees them in.
		final = a.create(t, clientID, labels)
		go func() {
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			s, err := a.watchCredential(ctx, final)
			answers <- answer{s, err}
		}()
	}
	got := <-answers
	if got.err != nil {
		t.Fatalf("the agent got no credential: %v", got.err)
	}
	secret := got.secret
	a.pickedUp(t, secret)
	waitCondition(t, ws, final.Name, metav1.ConditionTrue, fleet.GrantedReason)
	granted := time.Since(begin)

	clusterName := string(secret.Data[registration.KeyClusterName])
	nsC := string(secret.Data[registration.KeyDeploymentNamespace])
	requester := as(t, string(secret.Data[registration.KeyToken]))
	requestWorks := func() {
		t.Helper()
		cluster := &fleet.Cluster{}
		if err := requester.Get(t.Context(), client.ObjectKey{Namespace: ws, Name: clusterName}, cluster); err != nil {
			t.Errorf("request identity reading its Cluster: %v", err)
		} else if cluster.Spec.ClientID != clientID {
			t.Errorf("the credential names Cluster %s of clientID %q, want %q", clusterName, cluster.Spec.ClientID, clientID)
		}
		if err := requester.List(t.Context(), &fleet.BundleDeploymentList{}, client.InNamespace(nsC)); err != nil {
			t.Errorf("request identity listing its BundleDeployments: %v", err)
		}
	}
	requestWorks()

	// Once the pickup timeout passed, only the request identity of the
	// final registration is left.
	testenv.Eventually(t, restartPickupTimeout+30*time.Second, "exactly one of everything and no leftovers", func() error {
		return leftovers(t, ws, clientID, final.Name)
	})
	requestWorks()
	t.Logf("converged: killed or granted %s, granted %s, clean %s after the start", took.Round(time.Millisecond),
		granted.Round(time.Millisecond), time.Since(begin).Round(time.Millisecond))
	second.stop(t)
	if killed {
		return nil
	}
	return writes
}

func stringsOf(writes []write) []string {
	out := make([]string, 0, len(writes))
	for _, w := range writes {
		out = append(out, w.String())
	}
	return out
}

// leftovers checks that workspace ws holds one Cluster (of clientID) and one
// registration (keep), and that every object labelled for a registration of
// ws, in any namespace, belongs to keep and is its request identity: one
// ServiceAccount, two Roles and two RoleBindings; the credential Secret and
// the access to it are gone after the pickup timeout. Secrets are read from
// the API server.
func leftovers(t *testing.T, ws, clientID, keep string) error {
	t.Helper()
	var problems []string
	clusters := &fleet.ClusterList{}
	if err := up.List(t.Context(), clusters, client.InNamespace(ws)); err != nil {
		return err
	}
	if len(clusters.Items) != 1 || clusters.Items[0].Spec.ClientID != clientID {
		var got []string
		for _, c := range clusters.Items {
			got = append(got, c.Name+"(clientID "+c.Spec.ClientID+")")
		}
		problems = append(problems, fmt.Sprintf("Clusters %v, want one of clientID %s", got, clientID))
	}
	regs := &fleet.ClusterRegistrationList{}
	if err := up.List(t.Context(), regs, client.InNamespace(ws)); err != nil {
		return err
	}
	if len(regs.Items) != 1 || regs.Items[0].Name != keep {
		var got []string
		for _, r := range regs.Items {
			got = append(got, r.Name)
		}
		problems = append(problems, fmt.Sprintf("ClusterRegistrations %v, want only %s", got, keep))
	}
	namespaces := &corev1.NamespaceList{}
	if err := up.List(t.Context(), namespaces, client.MatchingLabels{fleet.ClusterNamespaceLabel: ws}); err != nil {
		return err
	}
	if len(namespaces.Items) != 1 {
		problems = append(problems, fmt.Sprintf("%d cluster namespaces, want 1", len(namespaces.Items)))
	}

	sel := client.MatchingLabels{registration.RegistrationNamespaceLabel: ws}
	for _, c := range []struct {
		list client.ObjectList
		kind string
		want int
	}{
		{&corev1.ServiceAccountList{}, "ServiceAccounts", 1},
		// The workspace Role of its Cluster; its binding and the cluster
		// namespace's to the shared role; no Secret (the sealed credential
		// is in the registration's status).
		{&rbacv1.RoleList{}, "Roles", 1},
		{&rbacv1.RoleBindingList{}, "RoleBindings", 2},
		{&corev1.SecretList{}, "Secrets", 0},
	} {
		if err := up.List(t.Context(), c.list, sel); err != nil {
			return err
		}
		var ours int
		var others []string
		items, _ := apimeta.ExtractList(c.list)
		for _, it := range items {
			o := it.(client.Object)
			if o.GetLabels()[registration.RegistrationLabel] == keep {
				ours++
				continue
			}
			others = append(others, o.GetNamespace()+"/"+o.GetName()+" for "+o.GetLabels()[registration.RegistrationLabel])
		}
		if len(others) > 0 {
			problems = append(problems, fmt.Sprintf("%s of other registrations: %v", c.kind, others))
		}
		if ours != c.want {
			problems = append(problems, fmt.Sprintf("%d %s of %s, want %d", ours, c.kind, keep, c.want))
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// runIsolated runs the calling test in a second process of this test binary
// without the shared controller, and reports its output.
func runIsolated(t *testing.T) {
	pattern := "^" + t.Name() + "$"
	// -run TestGrant_ControllerRestartAtEveryWriteConverges/<variant> selects
	// subtests in the second process too.
	if f := flag.Lookup("test.run"); f != nil {
		if _, sub, ok := strings.Cut(f.Value.String(), "/"); ok {
			pattern += "/" + sub
		}
	}
	args := []string{"-test.run=" + pattern, "-test.count=1", "-test.v"}
	if d, ok := t.Deadline(); ok {
		if left := time.Until(d) - 30*time.Second; left > time.Minute {
			args = append(args, "-test.timeout="+left.Round(time.Second).String())
		}
	}
	cmd := exec.CommandContext(t.Context(), os.Args[0], args...)
	cmd.Env = append(os.Environ(), isolatedEnv+"=1")
	cmd.WaitDelay = 10 * time.Second
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		_ = pw.Close()
		_ = pr.Close()
		t.Fatal(err)
	}
	_ = pw.Close()
	passed := false
	sc := bufio.NewScanner(pr)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "--- PASS: "+t.Name()+" ") {
			passed = true
		}
		t.Log("isolated: " + line)
	}
	_ = pr.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("isolated run of %s: %v", t.Name(), err)
	}
	if !passed {
		t.Fatalf("isolated run of %s did not report the test as passed", t.Name())
	}
}
