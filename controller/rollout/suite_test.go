package rollout_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller"
	"github.com/gitops-fleet/fleet/controller/rollout"
	"github.com/gitops-fleet/fleet/dev/controlplane"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/config"
)

var (
	env *controlplane.Env
	up  client.Client
	fc  *controller.Controller
)

// baseConfig is the controller configuration the suite starts with.
func baseConfig() *config.Config {
	return &config.Config{
		APIServerURL: "https://upstream.example.com:6443", APIServerCA: []byte("upstream-ca"),
		Bootstrap: config.Bootstrap{Enabled: ptr.To(false)},
	}
}

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.Options{ControlPlanes: &controlplane.Options{}}, func(s *testenv.Suite) error {
		env, up = s.Env, s.Env.Upstream.Client
		// The controller runs with exactly the rights charts/fleet gives it.
		identity, err := env.Upstream.FleetControllerIdentity(s.Context(), config.DefaultSystemNamespace)
		if err != nil {
			return err
		}
		fc, err = controller.New(s.Context(), controller.Options{RestConfig: identity, InitialConfig: baseConfig(), MetricsAddress: "0", ProbeAddress: "0"})
		if err != nil {
			return err
		}
		s.Go("controller", fc.Start)
		return nil
	})
}

// setConfig writes the fleet-controller ConfigMap, as the chart does, and
// waits until the controller uses it.
func setConfig(t *testing.T, cfg *config.Config) {
	t.Helper()
	doc, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: config.DefaultSystemNamespace, Name: config.ConfigMapName}}
	ctx := context.Background() // also from a Cleanup
	err = up.Get(ctx, client.ObjectKeyFromObject(cm), cm)
	cm.Data = map[string]string{config.ConfigMapKey: string(doc)}
	switch {
	case apierrors.IsNotFound(err):
		err = up.Create(ctx, cm)
	case err == nil:
		err = up.Update(ctx, cm)
	}
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the controller uses the new configuration", func() error {
		got, _ := json.Marshal(fc.Config.Get())
		if string(got) != string(doc) {
			return fmt.Errorf("configuration in force: %s", got)
		}
		return nil
	})
}

// standIn plays the agents of many clusters: for each agent
// BundleDeployment whose Bundle settled (the Bundle controller wrote the
// deployment of its latest content), it reports the deployment applied and
// Ready, as an agent whose new pod starts does, or not Ready, for a cluster
// told to fail on a revision (as an agent whose new pod cannot start, the
// old one still running, reports it). It records when it first saw each
// cluster on each revision.
type standIn struct {
	c client.Client

	mu sync.Mutex
	// failExcept: the cluster fails on every revision but this one.
	failExcept map[string]string
	// hold: the cluster reports nothing new for now.
	hold map[string]bool
	// seen[revision][cluster] is when it first applied that revision.
	seen map[string]map[string]time.Time
	// given[revision][cluster]: the cluster's agent Bundle was on that
	// revision at some point (settled or not).
	given map[string]map[string]bool
}

func newStandIn(c client.Client) *standIn {
	return &standIn{c: c, failExcept: map[string]string{}, hold: map[string]bool{}, seen: map[string]map[string]time.Time{}, given: map[string]map[string]bool{}}
}

func (s *standIn) set(f func(s *standIn)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

func (s *standIn) seenAt(revision, key string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.seen[revision][key]
	return t, ok
}

func (s *standIn) wasGiven(revision, key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.given[revision][key]
}

func (s *standIn) run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(100 * time.Millisecond):
		}
		bds := &fleet.BundleDeploymentList{}
		if err := s.c.List(ctx, bds, client.MatchingLabels{fleet.AgentBundleLabel: "true"}); err != nil {
			continue
		}
		for i := range bds.Items {
			s.report(ctx, &bds.Items[i])
		}
	}
}

func (s *standIn) report(ctx context.Context, bd *fleet.BundleDeployment) {
	b := &fleet.Bundle{}
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: bd.Labels[fleet.BundleNamespaceLabel], Name: bd.Labels[fleet.BundleLabel]}, b); err != nil {
		return
	}
	key := b.Namespace + "/" + b.Labels[fleet.ClusterLabel]
	rev := b.Annotations[rollout.RevisionAnnotation]
	s.mu.Lock()
	if s.given[rev] == nil {
		s.given[rev] = map[string]bool{}
	}
	s.given[rev][key] = true
	s.mu.Unlock()
	if b.Status.ObservedGeneration != b.Generation {
		return // the deployment may not be of the Bundle's latest content yet
	}
	s.mu.Lock()
	if s.hold[key] {
		s.mu.Unlock()
		return
	}
	except, fails := s.failExcept[key]
	ready := !fails || except == rev
	if s.seen[rev] == nil {
		s.seen[rev] = map[string]time.Time{}
	}
	if _, ok := s.seen[rev][key]; !ok {
		s.seen[rev][key] = time.Now()
	}
	s.mu.Unlock()
	if bd.Status.AppliedDeploymentID == bd.Spec.DeploymentID && bd.Status.Ready == ready && bd.Status.NonModified {
		return
	}
	bd.Status.AppliedDeploymentID = bd.Spec.DeploymentID
	bd.Status.Ready, bd.Status.NonModified = ready, true
	bd.Status.NonReadyStatus = nil
	if !ready {
		bd.Status.NonReadyStatus = []fleet.NonReadyStatus{{Kind: "Deployment", APIVersion: "apps/v1", Namespace: "cattle-fleet-system", Name: "fleet-agent", Summary: fleet.SummaryOf("InProgress", "the new agent pod does not start")}}
	}
	_ = s.c.Status().Update(ctx, bd)
}
