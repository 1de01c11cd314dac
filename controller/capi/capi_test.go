package capi_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fluxcd/pkg/ssa"

	"github.com/gitops-fleet/fleet/agent"
	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller"
	"github.com/gitops-fleet/fleet/controller/capi"
	"github.com/gitops-fleet/fleet/dev/controlplane"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/apply"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/names"
)

var (
	env         *controlplane.Env
	ctrl        *controller.Controller
	up          client.Client
	ctrlRun     *testenv.Runner
	crdOnce     sync.Once
	crdErr      error
	baseConfig  *config.Config
	agentSystem = config.DefaultSystemNamespace
)

// Namespaces opted in by the base configuration.
const (
	nsLifecycle = "capi-lifecycle"
	nsOptIn     = "capi-optin"
	nsHandMade  = "capi-handmade"
	nsDelete    = "capi-delete"
	nsNotListed = "capi-not-listed"
	nsRefused   = "capi-refused"
	nsUnsafe    = "capi-unsafe"
)

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.Options{ControlPlanes: &controlplane.Options{Downstreams: 2}}, func(s *testenv.Suite) error {
		env, up = s.Env, s.Env.Upstream.Client
		baseConfig = &config.Config{
			APIServerURL:                 env.Upstream.Config.Host,
			APIServerCA:                  env.Upstream.Config.CAData,
			AgentCheckinInterval:         metav1.Duration{Duration: time.Second},
			OfflineAfterMissedHeartbeats: 5,
			RequestCredentialTTL:         metav1.Duration{Duration: time.Hour},
			// Nothing applies agent Bundles here; their pending state would
			// hold Ready back.
			ManageAgent:    ptr.To(false),
			CAPINamespaces: []string{nsLifecycle, nsOptIn, nsHandMade, nsDelete, nsRefused, nsUnsafe},
		}
		var err error
		ctrl, err = controller.New(s.Context(), controller.Options{
			RestConfig:       env.Upstream.Config,
			InitialConfig:    baseConfig,
			MetricsAddress:   "0",
			ProbeAddress:     "0",
			CAPIPollInterval: 300 * time.Millisecond,
		})
		if err != nil {
			return err
		}
		ctrlRun = s.Go("controller", ctrl.Start)
		return nil
	})
}

// installCAPI installs the minimal Cluster API CRD once, while the
// controller is already running without it, as happens when CAPI is
// installed into a management cluster after fleet.
func installCAPI(t *testing.T) {
	t.Helper()
	crdOnce.Do(func() {
		// Give the watcher a few polls of a cluster without the CRD.
		time.Sleep(time.Second)
		select {
		case <-ctrlRun.Done():
			crdErr = fmt.Errorf("the controller stopped while the Cluster API was not installed: %v", ctrlRun.Err())
			return
		default:
		}
		b, err := os.ReadFile("testdata/cluster-api-crd.yaml")
		if err != nil {
			crdErr = err
			return
		}
		objs, err := apply.ReadObjects(b)
		if err != nil {
			crdErr = err
			return
		}
		_, crdErr = apply.NewManager(up).ApplyAllStaged(context.Background(), objs, ssa.DefaultApplyOptions())
	})
	if crdErr != nil {
		t.Fatal(crdErr)
	}
}

func namespace(t *testing.T, name string) {
	t.Helper()
	if err := up.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
}

// createCAPICluster creates a cluster.x-k8s.io/v1beta1 Cluster.
func createCAPICluster(t *testing.T, ns, name string, labels map[string]string, finalizers ...string) *unstructured.Unstructured {
	t.Helper()
	c := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"paused": false}}}
	c.SetAPIVersion(capi.Group + "/" + capi.PreferredVersion)
	c.SetKind(capi.Kind)
	c.SetNamespace(ns)
	c.SetName(name)
	c.SetLabels(labels)
	c.SetFinalizers(finalizers)
	if err := up.Create(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	return c
}

func updateCAPICluster(t *testing.T, c *unstructured.Unstructured, mutate func(*unstructured.Unstructured)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &unstructured.Unstructured{}
		cur.SetGroupVersionKind(c.GroupVersionKind())
		if err := up.Get(t.Context(), client.ObjectKeyFromObject(c), cur); err != nil {
			return err
		}
		mutate(cur)
		return up.Update(t.Context(), cur)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// kubeconfigSecret creates <name>-kubeconfig as CAPI writes it (type,
// cluster-name label, key "value"); nil data: a kubeconfig pointing at no
// server, for tests that do not import.
func kubeconfigSecret(t *testing.T, ns, name string, kubeconfig []byte) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + capi.KubeconfigSuffix, Labels: map[string]string{"cluster.x-k8s.io/cluster-name": name}},
		Type:       "cluster.x-k8s.io/secret",
		Data:       map[string][]byte{"value": kubeconfig},
	}
	if kubeconfig == nil {
		s.Data = map[string][]byte{"not-value": []byte("x")}
	}
	if err := up.Create(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	return s
}

func fleetCluster(t *testing.T, ns, name string) (*fleet.Cluster, error) {
	t.Helper()
	c := &fleet.Cluster{}
	err := up.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, c)
	return c, err
}

func waitFleetCluster(t *testing.T, ns, name string) *fleet.Cluster {
	t.Helper()
	var c *fleet.Cluster
	testenv.Eventually(t, 30*time.Second, fmt.Sprintf("fleet Cluster %s/%s", ns, name), func() error {
		var err error
		c, err = fleetCluster(t, ns, name)
		return err
	})
	return c
}

func waitFleetClusterGone(t *testing.T, ns, name string) {
	t.Helper()
	testenv.Eventually(t, 60*time.Second, fmt.Sprintf("fleet Cluster %s/%s deleted", ns, name), func() error {
		c, err := fleetCluster(t, ns, name)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("still there (deleting: %v, finalizers %v)", !c.DeletionTimestamp.IsZero(), c.Finalizers)
	})
}

func noFleetCluster(ns, name string) func() error {
	return func() error {
		c := &fleet.Cluster{}
		err := up.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, c)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("fleet Cluster %s/%s exists (labels %v)", ns, name, c.Labels)
	}
}

func condition(c *fleet.Cluster, t string) *metav1.Condition {
	return meta.FindStatusCondition(c.Status.Conditions, t)
}

func waitCondition(t *testing.T, ns, name, condType string, status metav1.ConditionStatus, reason string) *fleet.Cluster {
	t.Helper()
	var c *fleet.Cluster
	testenv.Eventually(t, 60*time.Second, fmt.Sprintf("%s/%s %s=%s (%s)", ns, name, condType, status, reason), func() error {
		var err error
		if c, err = fleetCluster(t, ns, name); err != nil {
			return err
		}
		cond := condition(c, condType)
		if cond == nil || cond.Status != status || (reason != "" && cond.Reason != reason) {
			return fmt.Errorf("conditions %+v", c.Status.Conditions)
		}
		return nil
	})
	return c
}

// waitCAPIEvent waits for an event with reason about the CAPI cluster
// ns/name: events are sent asynchronously, after the change they report.
func waitCAPIEvent(t *testing.T, ns, name, reason string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, "a "+reason+" event on the CAPI cluster "+ns+"/"+name, func() error {
		if capiEvents(t, ns, name, reason) == 0 {
			return fmt.Errorf("no %s event yet", reason)
		}
		return nil
	})
}

// capiEvents counts events with reason about the CAPI cluster ns/name.
func capiEvents(t *testing.T, ns, name, reason string) int {
	t.Helper()
	list := &corev1.EventList{}
	if err := up.List(t.Context(), list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range list.Items {
		if e.Reason == reason && e.InvolvedObject.Name == name && e.InvolvedObject.APIVersion == capi.Group+"/"+capi.PreferredVersion {
			n++
		}
	}
	return n
}

func labelsEqual(got, want map[string]string) error {
	if len(got) != len(want) {
		return fmt.Errorf("labels %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			return fmt.Errorf("labels %v, want %v", got, want)
		}
	}
	return nil
}

// runAgent runs the agent in-process against a downstream (nothing runs
// pods in these control planes), as the pushed Deployment would.
func runAgent(t *testing.T, ds *controlplane.ControlPlane) (*agent.Agent, func()) {
	t.Helper()
	g := int64(0)
	a, err := agent.New(agent.Options{
		Local: ds.Config, Namespace: agentSystem, PodName: "agent-" + ds.Name,
		CheckinInterval: time.Second, Generation: &g, RegistrationTimeout: 20 * time.Second, ResyncInterval: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	run := testenv.Start(t, "agent", a.Run)
	return a, func() {
		t.Helper()
		if err := run.Stop(30 * time.Second); err != nil {
			t.Error(err)
		}
	}
}

func waitRegistered(t *testing.T, a *agent.Agent, ns, name string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, "agent registered", func() error {
		gotNS, gotName := a.Registered()
		if gotNS != ns || gotName != name {
			return fmt.Errorf("registered as %q/%q (ready check: %v)", gotNS, gotName, a.ReadyCheck(nil))
		}
		return nil
	})
}

func bootstrapPushed(t *testing.T, ds *controlplane.ControlPlane) {
	t.Helper()
	testenv.Eventually(t, 60*time.Second, "agent pushed to "+ds.Name, func() error {
		s := &corev1.Secret{}
		return ds.Client.Get(t.Context(), client.ObjectKey{Namespace: agentSystem, Name: "fleet-agent-bootstrap"}, s)
	})
}

// TestCAPI_Lifecycle follows one CAPI cluster from creation to deletion:
// registration once its kubeconfig Secret exists, import of a real
// downstream and the agent reporting in, labels following, kubeconfig
// rotation to another downstream, and cleanup when the CAPI cluster goes.
func TestCAPI_Lifecycle(t *testing.T) {
	installCAPI(t)
	namespace(t, nsLifecycle)
	ds1, ds2 := env.Downstreams[0], env.Downstreams[1]
	c := createCAPICluster(t, nsLifecycle, "prod-1", map[string]string{
		"env": "prod", "region": "eu", fleet.ShardLabel: "3", "management.cattle.io/cluster": "forged", fleet.CAPIClusterLabel: "forged",
	})

	// No kubeconfig Secret yet (the control plane is not up): nothing.
	testenv.Consistently(t, 2*time.Second, "no fleet Cluster before the kubeconfig Secret exists", noFleetCluster(nsLifecycle, "prod-1"))

	kubeconfigSecret(t, nsLifecycle, "prod-1", ds1.Kubeconfig)
	fc := waitFleetCluster(t, nsLifecycle, "prod-1")
	if err := labelsEqual(fc.Labels, map[string]string{"env": "prod", "region": "eu", fleet.CAPIClusterLabel: "prod-1"}); err != nil {
		t.Errorf("the CAPI cluster's labels minus reserved ones, plus the auto-registration mark: %v", err)
	}
	if fc.Spec.KubeConfigSecret != "prod-1-kubeconfig" || fc.Spec.KubeConfigSecretNamespace != "" {
		t.Errorf("spec %+v", fc.Spec)
	}
	owner := metav1.GetControllerOf(fc)
	if owner == nil || owner.UID != c.GetUID() || owner.Kind != capi.Kind || owner.APIVersion != "cluster.x-k8s.io/v1beta1" {
		t.Errorf("owner references %+v, want the CAPI cluster (uid %s) as controller", fc.OwnerReferences, c.GetUID())
	}
	waitCAPIEvent(t, nsLifecycle, "prod-1", capi.RegisteredReason)

	// Imported as any manager-initiated cluster: the agent is pushed,
	// registers and reports in.
	bootstrapPushed(t, ds1)
	waitCondition(t, nsLifecycle, "prod-1", fleet.ImportedCondition, metav1.ConditionTrue, "")
	a1, stop1 := runAgent(t, ds1)
	waitRegistered(t, a1, nsLifecycle, "prod-1")
	fc = waitCondition(t, nsLifecycle, "prod-1", fleet.ReadyCondition, metav1.ConditionTrue, fleet.AgentHeartbeatReason)
	firstServer := fc.Status.KubeConfigServerHash

	// Labels follow the CAPI cluster; a label someone put on the fleet
	// Cluster stays.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := fleetCluster(t, nsLifecycle, "prod-1")
		if err != nil {
			return err
		}
		cur.Labels["team"] = "payments"
		return up.Update(t.Context(), cur)
	})
	if err != nil {
		t.Fatal(err)
	}
	updateCAPICluster(t, c, func(u *unstructured.Unstructured) {
		l := u.GetLabels()
		l["env"] = "staging"
		delete(l, "region")
		l["tier"] = "gold"
		u.SetLabels(l)
	})
	testenv.Eventually(t, 30*time.Second, "labels follow the CAPI cluster", func() error {
		fc, err := fleetCluster(t, nsLifecycle, "prod-1")
		if err != nil {
			return err
		}
		return labelsEqual(fc.Labels, map[string]string{"env": "staging", "tier": "gold", "team": "payments", fleet.CAPIClusterLabel: "prod-1"})
	})

	// Kubeconfig rotation: CAPI rewrites the Secret, here to point at
	// another cluster. The Cluster reconciler redeploys there.
	stop1()
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s := &corev1.Secret{}
		if err := up.Get(t.Context(), client.ObjectKey{Namespace: nsLifecycle, Name: "prod-1-kubeconfig"}, s); err != nil {
			return err
		}
		s.Data["value"] = bytes.Clone(ds2.Kubeconfig)
		return up.Update(t.Context(), s)
	})
	if err != nil {
		t.Fatal(err)
	}
	bootstrapPushed(t, ds2)
	testenv.Eventually(t, 30*time.Second, "status records the new server", func() error {
		fc, err := fleetCluster(t, nsLifecycle, "prod-1")
		if err != nil {
			return err
		}
		if fc.Status.KubeConfigServerHash == firstServer || fc.Status.KubeConfigServerHash == "" {
			return fmt.Errorf("kubeConfigServerHash still %q", fc.Status.KubeConfigServerHash)
		}
		return nil
	})
	a2, stop2 := runAgent(t, ds2)
	waitRegistered(t, a2, nsLifecycle, "prod-1")
	waitCondition(t, nsLifecycle, "prod-1", fleet.ReadyCondition, metav1.ConditionTrue, fleet.AgentHeartbeatReason)
	stop2()

	// The CAPI cluster goes: so does the fleet Cluster, with what was made
	// for it upstream and the agent downstream.
	if err := ds2.Client.Get(t.Context(), client.ObjectKey{Namespace: agentSystem, Name: "fleet-agent"}, &appsv1.Deployment{}); err != nil {
		t.Fatalf("the agent Deployment should be on %s before the deletion: %v", ds2.Name, err)
	}
	if err := up.Delete(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	waitFleetClusterGone(t, nsLifecycle, "prod-1")
	testenv.Eventually(t, 30*time.Second, "agent removed downstream", func() error {
		d := &appsv1.Deployment{}
		err := ds2.Client.Get(t.Context(), client.ObjectKey{Namespace: agentSystem, Name: "fleet-agent"}, d)
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("agent Deployment still there: %v", err)
	})
	testenv.Eventually(t, 30*time.Second, "cluster namespace removed upstream", func() error {
		ns := &corev1.Namespace{}
		err := up.Get(t.Context(), client.ObjectKey{Name: names.ClusterNamespace(nsLifecycle, "prod-1")}, ns)
		if apierrors.IsNotFound(err) || (err == nil && !ns.DeletionTimestamp.IsZero()) {
			return nil
		}
		return fmt.Errorf("namespace %s: %v", ns.Name, err)
	})
}

// TestCAPI_OnlyOptedInClustersRegister checks both opt-ins: namespaces and
// a label selector, that a configuration change applies at once, and that
// opting out deletes nothing.
func TestCAPI_OnlyOptedInClustersRegister(t *testing.T) {
	installCAPI(t)
	namespace(t, nsOptIn)
	namespace(t, nsNotListed)
	t.Cleanup(func() { ctrl.Config.Set(baseConfig) })
	const optInLabel = "fleet.example.com/register"
	createCAPICluster(t, nsOptIn, "a", nil)
	kubeconfigSecret(t, nsOptIn, "a", nil)
	outside := createCAPICluster(t, nsNotListed, "a", nil)
	kubeconfigSecret(t, nsNotListed, "a", nil)
	createCAPICluster(t, nsNotListed, "labelled", map[string]string{optInLabel: "yes"})
	kubeconfigSecret(t, nsNotListed, "labelled", nil)

	waitFleetCluster(t, nsOptIn, "a")
	testenv.Consistently(t, 2*time.Second, "a namespace not opted in is ignored", func() error {
		if err := noFleetCluster(nsNotListed, "a")(); err != nil {
			return err
		}
		return noFleetCluster(nsNotListed, "labelled")()
	})

	// Opt in by label instead: the labelled cluster registers at once.
	byLabel := *baseConfig
	byLabel.CAPINamespaces = nil
	byLabel.CAPIClusterSelector = optInLabel + "=yes"
	ctrl.Config.Set(&byLabel)
	waitFleetCluster(t, nsNotListed, "labelled")
	testenv.Consistently(t, time.Second, "an unlabelled cluster is ignored", noFleetCluster(nsNotListed, "a"))
	updateCAPICluster(t, outside, func(u *unstructured.Unstructured) { u.SetLabels(map[string]string{optInLabel: "yes"}) })
	waitFleetCluster(t, nsNotListed, "a")

	// nsOptIn/a is no longer opted in; its Cluster stays.
	if _, err := fleetCluster(t, nsOptIn, "a"); err != nil {
		t.Errorf("opting out must not delete: %v", err)
	}
}

// TestCAPI_HandMadeClusterIsNeverTakenOver: a fleet Cluster of the same name
// made by someone else is left alone and the conflict is reported; once it
// is gone the CAPI cluster registers.
func TestCAPI_HandMadeClusterIsNeverTakenOver(t *testing.T) {
	installCAPI(t)
	namespace(t, nsHandMade)
	mine := &fleet.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: nsHandMade, Name: "edge", Labels: map[string]string{"team": "mine"}},
		Spec:       fleet.ClusterSpec{ClientID: "edge-by-hand"},
	}
	if err := up.Create(t.Context(), mine); err != nil {
		t.Fatal(err)
	}
	c := createCAPICluster(t, nsHandMade, "edge", map[string]string{"env": "prod"})
	kubeconfigSecret(t, nsHandMade, "edge", nil)
	testenv.Eventually(t, 30*time.Second, "a conflict event on the CAPI cluster", func() error {
		if capiEvents(t, nsHandMade, "edge", capi.NameTakenReason) == 0 {
			return fmt.Errorf("no %s event yet", capi.NameTakenReason)
		}
		return nil
	})
	got, err := fleetCluster(t, nsHandMade, "edge")
	if err != nil {
		t.Fatal(err)
	}
	if labelsEqual(got.Labels, map[string]string{"team": "mine"}) != nil || len(got.OwnerReferences) != 0 ||
		got.Spec.KubeConfigSecret != "" || got.Spec.ClientID != "edge-by-hand" {
		t.Errorf("the hand-made Cluster was changed: labels %v, owners %v, spec %+v", got.Labels, got.OwnerReferences, got.Spec)
	}

	// The name is free again: the CAPI cluster registers.
	if err := up.Delete(t.Context(), got); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "the CAPI cluster registers once the name is free", func() error {
		fc, err := fleetCluster(t, nsHandMade, "edge")
		if err != nil {
			return err
		}
		if fc.Labels[fleet.CAPIClusterLabel] != "edge" || fc.Spec.ClientID == "edge-by-hand" {
			return fmt.Errorf("not the auto-registered one yet: labels %v", fc.Labels)
		}
		return nil
	})
	if err := up.Delete(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	waitFleetClusterGone(t, nsHandMade, "edge")
}

// TestCAPI_DeletionStartsWhenTheCAPIClusterIsBeingDeleted: CAPI keeps a
// deleted Cluster while it tears the infrastructure down (finalizers); the
// fleet Cluster goes at once, while the downstream still answers. A bad
// kubeconfig Secret is reported on the fleet Cluster.
func TestCAPI_DeletionStartsWhenTheCAPIClusterIsBeingDeleted(t *testing.T) {
	installCAPI(t)
	namespace(t, nsDelete)
	const hold = "test.fleet.cattle.io/teardown"
	c := createCAPICluster(t, nsDelete, "doomed", nil, hold)
	kubeconfigSecret(t, nsDelete, "doomed", nil)
	waitCondition(t, nsDelete, "doomed", fleet.StalledCondition, metav1.ConditionTrue, fleet.KubeConfigKeyMissingReason)

	if err := up.Delete(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	waitFleetClusterGone(t, nsDelete, "doomed")
	cur := &unstructured.Unstructured{}
	cur.SetGroupVersionKind(c.GroupVersionKind())
	if err := up.Get(t.Context(), client.ObjectKeyFromObject(c), cur); err != nil || cur.GetDeletionTimestamp() == nil {
		t.Errorf("the CAPI cluster should still be tearing down: %v", err)
	}
	waitCAPIEvent(t, nsDelete, "doomed", capi.DeregisteredReason)
	updateCAPICluster(t, c, func(u *unstructured.Unstructured) { u.SetFinalizers(nil) })
}

// TestCAPI_CreateFailureIsReported: when the API server refuses the fleet
// Cluster (here an admission policy of the organisation), the CAPI cluster
// says why.
func TestCAPI_CreateFailureIsReported(t *testing.T) {
	installCAPI(t)
	namespace(t, nsRefused)
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "test-no-fleet-clusters"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{fleet.GroupVersion.Group}, APIVersions: []string{"*"}, Resources: []string{"clusters"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{Expression: "false", Message: "fleet Clusters are not allowed in this namespace"}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "test-no-fleet-clusters"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        policy.Name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"kubernetes.io/metadata.name": nsRefused},
			}},
		},
	}
	for _, o := range []client.Object{policy, binding} {
		if err := up.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = up.Delete(context.Background(), o) })
	}
	testenv.Eventually(t, 30*time.Second, "the policy in force", func() error {
		probe := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: nsRefused, Name: "probe"}}
		if err := up.Create(t.Context(), probe, client.DryRunAll); err == nil || !apierrors.IsInvalid(err) {
			return fmt.Errorf("a Cluster is still admitted: %v", err)
		}
		return nil
	})

	createCAPICluster(t, nsRefused, "refused", nil)
	kubeconfigSecret(t, nsRefused, "refused", nil)
	testenv.Eventually(t, 30*time.Second, "a "+capi.NotCreatedReason+" event", func() error {
		if capiEvents(t, nsRefused, "refused", capi.NotCreatedReason) == 0 {
			return fmt.Errorf("no event yet")
		}
		return nil
	})
	if err := noFleetCluster(nsRefused, "refused")(); err != nil {
		t.Error(err)
	}
}

// TestCAPI_UnsafeKubeconfigIsRefusedLikeAnyOther: a Cluster API
// <name>-kubeconfig Secret is held to the same kubeconfig policy as one
// committed by hand: an exec plugin leaves the fleet Cluster Stalled naming
// the field, and nothing is pushed.
func TestCAPI_UnsafeKubeconfigIsRefusedLikeAnyOther(t *testing.T) {
	installCAPI(t)
	namespace(t, nsUnsafe)
	raw, err := clientcmd.Load(env.Downstreams[1].Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range raw.AuthInfos {
		u.Exec = &clientcmdapi.ExecConfig{APIVersion: "client.authentication.k8s.io/v1", Command: "/bin/true", InteractiveMode: clientcmdapi.NeverExecInteractiveMode}
	}
	kc, err := clientcmd.Write(*raw)
	if err != nil {
		t.Fatal(err)
	}
	createCAPICluster(t, nsUnsafe, "exec", nil)
	kubeconfigSecret(t, nsUnsafe, "exec", kc)
	got := waitCondition(t, nsUnsafe, "exec", fleet.StalledCondition, metav1.ConditionTrue, fleet.KubeConfigUnsafeReason)
	if msg := condition(got, fleet.StalledCondition).Message; !strings.Contains(msg, ".exec") || !strings.Contains(msg, "insecureKubeconfig.exec") {
		t.Errorf("the message must name the field and the opt-in: %s", msg)
	}
	if err := up.Get(t.Context(), client.ObjectKey{Namespace: nsUnsafe, Name: "import-token-exec"}, &fleet.ClusterRegistrationToken{}); !apierrors.IsNotFound(err) {
		t.Errorf("an import token was made for a refused kubeconfig: %v", err)
	}
}
