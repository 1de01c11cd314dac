package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/devenv"
	"github.com/gitops-fleet/fleet/internal/registration"
)

// offlineWindow is the controller's default offline window (3 missed
// heartbeats of 1m): earlier releases refused a generic token's
// re-registration within it.
const offlineWindow = 3 * time.Minute

// identitySecret reads the agent's identity Secret downstream.
func identitySecret(t *testing.T, cs *kubernetes.Clientset) *corev1.Secret {
	t.Helper()
	s, err := cs.CoreV1().Secrets(agentNS).Get(t.Context(), registration.IdentitySecretName, metav1.GetOptions{})
	must(t, err)
	return s
}

// killRequestIdentity deletes, upstream, the request ServiceAccount of the
// agent's stored credential: the API server answers that credential 401, as
// it does an expired token.
func killRequestIdentity(t *testing.T, cs *kubernetes.Clientset) string {
	t.Helper()
	cred, err := cs.CoreV1().Secrets(agentNS).Get(t.Context(), registration.AgentCredentialSecretName, metav1.GetOptions{})
	must(t, err)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{
		Namespace: string(cred.Data[registration.KeyDeploymentNamespace]), Name: string(cred.Data[registration.KeyServiceAccount])}}
	must(t, up.Delete(t.Context(), sa))
	return sa.Namespace
}

// stopAgent scales the agent to zero and waits until no agent pod is left.
// An agent-initiated cluster's agent Bundle corrects drift, so an agent
// still running when the scale lands may put its replicas back (its drift
// check can run in the moment before its pod ends); the scale is made again
// until no agent is left to undo it, as an operator stopping an agent would.
func stopAgent(t *testing.T, cs *kubernetes.Clientset) {
	t.Helper()
	must(t, devenv.Poll(t.Context(), 2*time.Minute, func() error {
		s, err := cs.AppsV1().Deployments(agentNS).GetScale(t.Context(), "fleet-agent", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if s.Spec.Replicas != 0 {
			s.Spec.Replicas = 0
			if _, err := cs.AppsV1().Deployments(agentNS).UpdateScale(t.Context(), "fleet-agent", s, metav1.UpdateOptions{}); err != nil {
				return err
			}
		}
		pods, err := cs.CoreV1().Pods(agentNS).List(t.Context(), metav1.ListOptions{LabelSelector: agentPods})
		if err != nil {
			return err
		}
		if len(pods.Items) > 0 {
			var b strings.Builder
			for i := range pods.Items {
				p := &pods.Items[i]
				fmt.Fprintf(&b, " pod %s created %s phase %s deleting %v;", p.Name, p.CreationTimestamp.Format(time.RFC3339), p.Status.Phase, p.DeletionTimestamp != nil)
			}
			return fmt.Errorf("%d agent pods still there:%s", len(pods.Items), b.String())
		}
		return nil
	}))
}

// grantedRegistration waits for a granted registration of cluster that
// matches, and returns it.
func grantedRegistration(t *testing.T, cluster string, timeout time.Duration, match func(*fleet.ClusterRegistration) bool) *fleet.ClusterRegistration {
	t.Helper()
	var got *fleet.ClusterRegistration
	must(t, devenv.Poll(t.Context(), timeout, func() error {
		l := &fleet.ClusterRegistrationList{}
		if err := up.List(t.Context(), l, client.InNamespace(ws)); err != nil {
			return err
		}
		for i := range l.Items {
			r := &l.Items[i]
			if r.Status.ClusterName == cluster && r.Status.Granted && match(r) {
				got = r
				return nil
			}
		}
		return fmt.Errorf("no matching granted registration of %s among %d", cluster, len(l.Items))
	}))
	return got
}

// testRecovery: the agent of dev-2 is stopped, and meanwhile its request
// credential dies upstream (nothing else changes: no bootstrap Secret is
// left downstream, the token it was installed with is not used). Started
// again, it comes back Ready by itself, through its Cluster's recovery
// identity, signed with its key.
func testRecovery(t *testing.T, name string) {
	start := time.Now()
	cs := clientset(t, "dev-2")
	runningAgent(t, cs, time.Minute)
	// The agent minted its recovery token at its second heartbeat.
	must(t, devenv.Poll(t.Context(), 3*time.Minute, func() error {
		s := identitySecret(t, cs)
		if len(s.Data[registration.KeyRecoveryToken]) == 0 || string(s.Data[registration.KeyClusterName]) != name {
			return fmt.Errorf("no recovery token for %s in %s/%s yet", name, agentNS, registration.IdentitySecretName)
		}
		return nil
	}))
	key, err := registration.IdentityKeyFromSeed(identitySecret(t, cs).Data[registration.KeyIdentitySeed])
	must(t, err)
	if got := getCluster(t, name).Annotations[fleet.AgentIdentityKeyAnnotation]; got != key.PublicKey() {
		t.Fatalf("Cluster %s records key %q, not its agent's", name, got)
	}

	stopAgent(t, cs)
	clusterNS := killRequestIdentity(t, cs)
	if _, err := cs.CoreV1().Secrets(agentNS).Get(t.Context(), registration.BootstrapSecretName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a bootstrap Secret is in %s: %v", agentNS, err)
	}
	stopped := getCluster(t, name).Status.Agent.LastSeen
	restart := time.Now()
	scaleAgent(t, cs, 1)

	reg := grantedRegistration(t, name, 3*time.Minute, func(r *fleet.ClusterRegistration) bool {
		return r.Labels[fleet.RecoveryNamespaceLabel] == clusterNS
	})
	if reg.Spec.IdentityPublicKey != key.PublicKey() || reg.Labels[fleet.RegistrationTokenLabel] != "" {
		t.Errorf("recovery registration %s: key %q, labels %v", reg.Name, reg.Spec.IdentityPublicKey, reg.Labels)
	}
	must(t, devenv.Poll(t.Context(), 2*time.Minute, func() error {
		c := getCluster(t, name)
		if !c.Status.Agent.LastSeen.After(stopped.Time) {
			return fmt.Errorf("no heartbeat since the agent started again")
		}
		if r := meta.FindStatusCondition(c.Status.Conditions, fleet.ReadyCondition); r == nil || r.Status != metav1.ConditionTrue {
			return fmt.Errorf("cluster %s not Ready: %+v", name, r)
		}
		return nil
	}))
	runningAgent(t, cs, time.Minute)
	t.Logf("recovered through the recovery identity %.1fs after the agent started again (%.1fs in all)", time.Since(restart).Seconds(), time.Since(start).Seconds())
}

// testReinstall: helm uninstall, then helm install with the same token's
// values (a token not bound to the clientID), while the Cluster's last
// heartbeat is recent. The identity key survives the uninstall, so the new
// registration is granted, which earlier releases refused until the
// Cluster went offline. The agent-written credential Secret survives helm
// uninstall too, and a credential that works is simply used again: it is
// deleted here, as it is gone after an outage longer than its lifetime.
func testReinstall(t *testing.T, name string) {
	start := time.Now()
	cs := clientset(t, "dev-2")
	runningAgent(t, cs, time.Minute)
	key := identitySecret(t, cs).Data[registration.KeyIdentitySeed]
	values, err := devenv.TokenValues(t.Context(), up, ws, "dev-token")
	must(t, err)

	must(t, env.UninstallAgent(t.Context(), cluster("dev-2"), agentNS))
	if s := identitySecret(t, cs); string(s.Data[registration.KeyIdentitySeed]) != string(key) {
		t.Fatal("helm uninstall changed the identity key")
	}
	must(t, cs.CoreV1().Secrets(agentNS).Delete(t.Context(), registration.AgentCredentialSecretName, metav1.DeleteOptions{}))
	lastSeen := getCluster(t, name).Status.Agent.LastSeen
	installed := time.Now()
	must(t, env.InstallAgent(t.Context(), cluster("dev-2"), agentNS, values, "clientID=dev-2", "labels.env=dev"))

	reg := grantedRegistration(t, name, 3*time.Minute, func(r *fleet.ClusterRegistration) bool {
		return r.Labels[fleet.RegistrationTokenLabel] == "dev-token" && r.CreationTimestamp.After(installed.Add(-time.Second))
	})
	granted := meta.FindStatusCondition(reg.Status.Conditions, fleet.GrantedCondition)
	if since := granted.LastTransitionTime.Sub(lastSeen.Time); since >= offlineWindow {
		t.Errorf("granted %s after the last heartbeat: the Cluster was offline, this proves nothing about an online one", since)
	}
	if _, err := devenv.ClusterReady(t.Context(), up, ws, name, 2*time.Minute); err != nil {
		t.Error(err)
	}
	// The token's values know nothing of the Cluster's own agent settings
	// (its redeployAgentGeneration among them): the agent's Bundle rolls
	// the reinstalled agent once to them. The next tests count agent pods,
	// so this one ends when that rollout has.
	gen := strconv.FormatInt(getCluster(t, name).Spec.RedeployAgentGeneration, 10)
	must(t, devenv.Poll(t.Context(), 2*time.Minute, func() error {
		d, err := cs.AppsV1().Deployments(agentNS).Get(t.Context(), "fleet-agent", metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, e := range d.Spec.Template.Spec.Containers[0].Env {
			if e.Name == "GENERATION" && e.Value != gen {
				return fmt.Errorf("the agent Deployment has GENERATION %s, its Bundle %s: not adopted by its Bundle yet", e.Value, gen)
			}
		}
		return rolledOut(d)
	}))
	runningAgent(t, cs, 2*time.Minute)
	t.Logf("reinstalled agent registered again %.1fs after helm install, %s after the last heartbeat (%.1fs in all)",
		time.Since(installed).Seconds(), granted.LastTransitionTime.Sub(lastSeen.Time).Round(time.Second), time.Since(start).Seconds())
}
