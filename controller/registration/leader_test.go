package registration_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller/admission"
	"github.com/gitops-fleet/fleet/controller/configstore"
	ctrlreg "github.com/gitops-fleet/fleet/controller/registration"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/registration"
)

// The tests in this file prove that whether a registration is granted is
// state read from the API server, not remembered by a process: a new
// leader whose cache has not caught up with the grant, and two controllers
// granting the same registration at once, never grant it twice and never
// write a credential again once the agent picked it up. They start
// controllers of their own, so they run isolated (see runIsolated).

// leaderPickupTimeout is long: the credential Secret is not removed by the
// controller while a test watches it.
const leaderPickupTimeout = time.Minute

// process is one controller process as far as registrations go.
type process struct {
	r       *ctrlreg.Reconciler
	checker *admission.Checker
	cancel  context.CancelFunc
	run     *testenv.Runner
	// writes are the writes the process made (on its connection).
	writes *writeLog
}

// startProcess starts a registration controller with a manager of its own.
// before, when set, is called before each of its writes (writeLog.before);
// lagging, when set, is what its cache shows of that registration
// (whatever the API server has).
func startProcess(t *testing.T, before func(write), lagging *fleet.ClusterRegistration) *process {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p := &process{cancel: cancel, writes: newWriteLog(0, cancel)}
	p.writes.before = before
	cfg := p.writes.config(env.Upstream.Config)
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
	if p.checker, err = admission.New(mgr.GetCache(), admission.Options{}); err != nil {
		cancel()
		t.Fatal(err)
	}
	if err := mgr.Add(p.checker); err != nil {
		cancel()
		t.Fatal(err)
	}
	var c client.Client = mgr.GetClient()
	if lagging != nil {
		c = laggingCache{Client: c, stale: lagging}
	}
	p.r = &ctrlreg.Reconciler{
		Admission:               p.checker,
		APIReader:               mgr.GetAPIReader(),
		Client:                  c,
		Config:                  configstore.New(config.DefaultSystemNamespace, config.ConfigMapName, controllerConfig()),
		Clientset:               clientset,
		Recorder:                mgr.GetEventRecorder("fleet-controller"),
		CredentialPickupTimeout: leaderPickupTimeout,
	}
	if err := p.r.SetupWithManager(ctx, mgr); err != nil {
		cancel()
		t.Fatal(err)
	}
	p.run = testenv.Go(ctx, "registration controller", mgr.Start)
	t.Cleanup(func() { p.stop(t) })
	return p
}

func (p *process) stop(t *testing.T) {
	t.Helper()
	p.cancel()
	if err := p.run.Stop(60 * time.Second); err != nil {
		t.Error(err)
	}
}

// laggingCache is a cache that has not caught up: it shows one
// registration as it was at some earlier moment, in reads and in lists.
type laggingCache struct {
	client.Client
	stale *fleet.ClusterRegistration
}

func (c laggingCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if reg, ok := obj.(*fleet.ClusterRegistration); ok && key == client.ObjectKeyFromObject(c.stale) {
		c.stale.DeepCopyInto(reg)
		return nil
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

func (c laggingCache) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if err := c.Client.List(ctx, list, opts...); err != nil {
		return err
	}
	if regs, ok := list.(*fleet.ClusterRegistrationList); ok {
		for i := range regs.Items {
			if regs.Items[i].UID == c.stale.UID {
				c.stale.DeepCopyInto(&regs.Items[i])
			}
		}
	}
	return nil
}

// credentialEvents records the credential of one registration, as every
// watch event of it shows it.
type credentialEvents struct {
	mu    sync.Mutex
	seen  [][]byte
	rvs   []string
	types []watch.EventType
}

// watchGrants records every event of reg until the test ends.
func watchGrants(t *testing.T, reg *fleet.ClusterRegistration) *credentialEvents {
	t.Helper()
	c, err := client.NewWithWatch(env.Upstream.Config, client.Options{Scheme: env.Upstream.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.Watch(t.Context(), &fleet.ClusterRegistrationList{},
		client.InNamespace(reg.Namespace), client.MatchingFields{"metadata.name": reg.Name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	s := &credentialEvents{}
	go func() {
		for ev := range w.ResultChan() {
			r, ok := ev.Object.(*fleet.ClusterRegistration)
			if !ok {
				continue
			}
			s.mu.Lock()
			s.seen = append(s.seen, r.Status.Credential)
			s.rvs = append(s.rvs, r.ResourceVersion)
			s.types = append(s.types, ev.Type)
			s.mu.Unlock()
		}
	}()
	return s
}

func (s *credentialEvents) log(t *testing.T) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, c := range s.seen {
		t.Logf("%s resourceVersion %s credential %x…", s.types[i], s.rvs[i], c[:min(8, len(c))])
	}
}

// count returns how often a credential appeared in the registration's
// status, and how often it changed to another one.
func (s *credentialEvents) count() (added, rewritten int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var last []byte
	for _, c := range s.seen {
		switch {
		case len(c) == 0:
		case len(last) == 0:
			added++
		case !bytes.Equal(c, last):
			rewritten++
		}
		if len(c) > 0 {
			last = c
		}
	}
	return added, rewritten
}

// TestGrant_NewLeaderWithALaggingCacheNeverGrantsAgain: controller A grants
// a registration and the agent picks its credential up; then A goes and B,
// whose cache still shows the registration as it was before A recorded the
// grant (a standby's watch lagging at the leader change), takes over. B
// must not run the grant again: the credential Secret is not written again
// (nor, for an older agent's registration, brought back once picked up),
// no token is minted and the registration is not written: B sends no
// write, not even a dry run.
func TestGrant_NewLeaderWithALaggingCacheNeverGrantsAgain(t *testing.T) {
	if !isolated {
		runIsolated(t)
		return
	}
	ws := testenv.Namespace(t, up, "fleet-ws-")
	a := newAgent(t, ws, "tok", importToken(t, ws, "tok", ""))
	reg := a.create(t, randomID("cid-"), nil)
	key := client.ObjectKeyFromObject(reg)
	events := watchGrants(t, reg)

	// What B's cache will show: the registration right before A recorded
	// the grant (finalizer set, everything made and the credential minted,
	// status not yet), read as A sends the status write that grants.
	var before atomic.Pointer[fleet.ClusterRegistration]
	first := startProcess(t, func(w write) {
		if !w.grants || w.name != reg.Name || before.Load() != nil {
			return
		}
		r := &fleet.ClusterRegistration{}
		if err := up.Get(context.Background(), key, r); err != nil {
			t.Errorf("reading the registration before %s: %v", w, err)
			return
		}
		before.Store(r)
	}, nil)
	secret := a.waitCredential(t, reg, 60*time.Second)
	a.pickedUp(t, secret)
	granted := waitCondition(t, ws, reg.Name, metav1.ConditionTrue, fleet.GrantedReason)
	first.stop(t)
	stale := before.Load()
	if stale == nil || stale.Status.Granted || len(stale.Finalizers) == 0 {
		t.Fatalf("no view of the registration between the credential and the status: %+v", stale)
	}

	second := startProcess(t, nil, stale)
	testenv.Eventually(t, 30*time.Second, "the admission policies checked", func() error {
		if !second.checker.Checked() {
			return fmt.Errorf("not checked yet")
		}
		return nil
	})
	// B's own passes (its informers list the registration at start) and
	// a few more.
	for i := range 3 {
		res, err := second.r.Reconcile(t.Context(), ctrl.Request{NamespacedName: key})
		if err != nil {
			t.Fatalf("pass %d of the new leader: %v", i, err)
		}
		t.Logf("pass %d of the new leader: %+v", i, res)
	}
	time.Sleep(2 * time.Second)

	if added, rewritten := events.count(); added != 1 || rewritten != 0 {
		t.Errorf("credential handed over %d times and rewritten %d times, want once and never", added, rewritten)
		events.log(t)
	}
	now := getReg(t, ws, reg.Name)
	if now.ResourceVersion != granted.ResourceVersion || !now.Status.Granted {
		t.Errorf("the new leader wrote the granted registration: resourceVersion %s → %s, status %+v", granted.ResourceVersion, now.ResourceVersion, now.Status)
	}
	// Not even a dry run: it never went into the grant.
	if sent := second.writes.attempts(); len(sent) > 0 {
		t.Errorf("the new leader sent writes %v, want none", sent)
	}
}

// TestGrant_TwoControllersAtOnceGrantOnce: two controllers grant the same
// registration at the same moment. Both get as far as the credential (the
// test holds each at its status write that grants until the other
// arrives, so they race for the status), yet the credential is handed over
// once with one token, exactly one of them records the grant (the status
// write carries the version the pass decided on), and once the agent
// picked the credential up nothing writes it again.
func TestGrant_TwoControllersAtOnceGrantOnce(t *testing.T) {
	if !isolated {
		runIsolated(t)
		return
	}
	ws := testenv.Namespace(t, up, "fleet-ws-")
	a := newAgent(t, ws, "tok", importToken(t, ws, "tok", ""))
	reg := a.create(t, randomID("cid-"), nil)
	events := watchGrants(t, reg)

	var (
		mu      sync.Mutex
		arrived = map[int]bool{}
		release = make(chan struct{})
	)
	holdAtGrant := func(id int) func(write) {
		return func(w write) {
			if !w.grants || w.name != reg.Name {
				return
			}
			mu.Lock()
			if arrived[id] {
				mu.Unlock()
				return
			}
			arrived[id] = true
			if len(arrived) == 2 {
				close(release)
			}
			mu.Unlock()
			select {
			case <-release:
			case <-time.After(30 * time.Second):
			}
		}
	}
	grantsOf := func(p *process) int {
		n := 0
		for _, w := range p.writes.seen() {
			if w.grants && w.name == reg.Name {
				n++
			}
		}
		return n
	}
	one := startProcess(t, holdAtGrant(1), nil)
	two := startProcess(t, holdAtGrant(2), nil)

	secret := a.waitCredential(t, reg, 90*time.Second)
	waitCondition(t, ws, reg.Name, metav1.ConditionTrue, fleet.GrantedReason)
	select {
	case <-release:
	case <-time.After(60 * time.Second):
		t.Fatal("the two controllers did not both reach the status write that grants")
	}
	// The pass that lost the race fails and looks again; let it.
	time.Sleep(2 * time.Second)
	if n := grantsOf(one) + grantsOf(two); n != 1 {
		t.Errorf("the grant was recorded %d times, want once (writes: %v and %v)", n, one.writes.seen(), two.writes.seen())
	}
	if added, rewritten := events.count(); added != 1 || rewritten != 0 {
		t.Errorf("credential handed over %d times and rewritten %d times, want once and never", added, rewritten)
	}

	// The agent picks the credential up; nothing writes it again, whatever
	// brings the registration back to either controller.
	a.pickedUp(t, secret)
	for i := range 3 {
		r := getReg(t, ws, reg.Name)
		patch := client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"annotations":{"test/poke":"%d"}}}`, i)))
		if err := up.Patch(t.Context(), r, patch); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	time.Sleep(time.Second)
	if added, _ := events.count(); added != 1 {
		t.Errorf("credential handed over %d times, want once", added)
	}
	if err := as(t, string(secret.Data[registration.KeyToken])).List(t.Context(), &fleet.BundleDeploymentList{},
		client.InNamespace(string(secret.Data[registration.KeyDeploymentNamespace]))); err != nil {
		t.Errorf("the credential handed out: %v", err)
	}
}
