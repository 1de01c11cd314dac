package controller_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/names"
)

// rolloutBundle is a Bundle as `fleet apply` writes it from a fleet.yaml
// with a rolloutStrategy: a canary partition of the clusters labelled
// canary=yes that tolerates one unavailable cluster; the other clusters
// form the last partition.
const rolloutBundle = `
apiVersion: fleet.cattle.io/v1alpha1
kind: Bundle
metadata:
  name: app
spec:
  correctDrift: {}
  ignore: {}
  defaultNamespace: app
  resources:
  - name: cm.yaml
    content: |
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: app
      data:
        version: "1"
  rolloutStrategy:
    partitions:
    - name: canary
      maxUnavailable: 1
      clusterSelector:
        matchLabels:
          canary: "yes"
  targets:
  - name: all
    clusterSelector:
      matchLabels:
        env: prod
`

// deployments reads the Bundle's BundleDeployments by cluster.
func deployments(t *testing.T, ws, bundle string) map[string]*fleet.BundleDeployment {
	t.Helper()
	list := &fleet.BundleDeploymentList{}
	if err := up.List(t.Context(), list, client.MatchingLabels{fleet.BundleLabel: bundle, fleet.BundleNamespaceLabel: ws}); err != nil {
		t.Fatal(err)
	}
	out := map[string]*fleet.BundleDeployment{}
	for i := range list.Items {
		out[list.Items[i].Labels[fleet.ClusterLabel]] = &list.Items[i]
	}
	return out
}

// agentReports writes a cluster's BundleDeployment status as its agent
// does once it applied the deployment in force: applied, and Ready or not.
func agentReports(t *testing.T, ws, cluster, bundle string, ready bool) {
	t.Helper()
	key := client.ObjectKey{Namespace: names.ClusterNamespace(ws, cluster), Name: bundle}
	testenv.Eventually(t, 30*time.Second, fmt.Sprintf("the agent of %s reports %s (Ready %v)", cluster, bundle, ready), func() error {
		bd := &fleet.BundleDeployment{}
		if err := up.Get(t.Context(), key, bd); err != nil {
			return err
		}
		bd.Status.AppliedDeploymentID, bd.Status.Ready, bd.Status.NonModified = bd.Spec.DeploymentID, ready, true
		cond := metav1.Condition{Type: fleet.ReadyCondition, Status: metav1.ConditionTrue, Reason: fleet.SucceededReason, ObservedGeneration: bd.Generation}
		if !ready {
			cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, fleet.NotReadyReason, "Deployment app/app: 0 of 1 replicas available"
		}
		meta.SetStatusCondition(&bd.Status.Conditions, cond)
		return up.Status().Update(t.Context(), bd)
	})
}

// rolloutState is what the test checks of each cluster: the deployment in
// force and the staged one, by the Bundle version they carry.
func rolloutState(t *testing.T, ws string, ids map[string]string, clusters ...string) string {
	t.Helper()
	bds := deployments(t, ws, "app")
	var parts []string
	for _, c := range clusters {
		bd := bds[c]
		if bd == nil {
			parts = append(parts, c+"=none")
			continue
		}
		parts = append(parts, fmt.Sprintf("%s=%s/%s", c, ids[bd.Spec.DeploymentID], ids[bd.Spec.StagedDeploymentID]))
	}
	return strings.Join(parts, " ")
}

func TestBundle_RolloutStopsAtAnUnavailablePartitionAndGoesOnWhenItRecovers(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-partitions-")
	clusters := []string{"canary-1", "canary-2", "prod-1", "prod-2"}
	for _, c := range clusters {
		labels := map[string]string{"env": "prod"}
		if strings.HasPrefix(c, "canary") {
			labels["canary"] = "yes"
		}
		newCluster(t, ws, c, labels)
	}
	b := &fleet.Bundle{}
	if err := yaml.UnmarshalStrict([]byte(rolloutBundle), b); err != nil {
		t.Fatal(err)
	}
	b.Namespace = ws
	if err := up.Create(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	// ids names each deploymentID by the Bundle version it carries.
	ids := map[string]string{"": "-"}
	learn := func(version string, cluster string) {
		t.Helper()
		testenv.Eventually(t, 30*time.Second, "the deploymentID of version "+version, func() error {
			bd := deployments(t, ws, "app")[cluster]
			if bd == nil || ids[bd.Spec.StagedDeploymentID] != "" {
				return fmt.Errorf("no new deployment staged on %s yet", cluster)
			}
			ids[bd.Spec.StagedDeploymentID] = version
			return nil
		})
	}
	expect := func(what, want string) {
		t.Helper()
		testenv.Eventually(t, 30*time.Second, what, func() error {
			if got := rolloutState(t, ws, ids, clusters...); got != want {
				return fmt.Errorf("clusters %s, want %s", got, want)
			}
			return nil
		})
	}
	readyCondition := func(what string, check func(b *fleet.Bundle, c *metav1.Condition) error) {
		t.Helper()
		testenv.Eventually(t, 30*time.Second, what, func() error {
			cur := &fleet.Bundle{}
			if err := up.Get(t.Context(), client.ObjectKeyFromObject(b), cur); err != nil {
				return err
			}
			c := meta.FindStatusCondition(cur.Status.Conditions, fleet.ReadyCondition)
			if c == nil || cur.Status.ObservedGeneration != cur.Generation {
				return fmt.Errorf("generation %d observed %d, Ready %+v", cur.Generation, cur.Status.ObservedGeneration, c)
			}
			return check(cur, c)
		})
	}
	change := func(version string) {
		t.Helper()
		updateBundle(t, b, func(b *fleet.Bundle) {
			b.Spec.Resources[0].Content = fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  version: %q\n", version)
		})
		learn(version, "canary-1")
	}

	// A new Bundle: the canary first; the others get their
	// BundleDeployment once the canary is Ready.
	learn("v1", "canary-1")
	expect("the canary deployed first", "canary-1=v1/v1 canary-2=v1/v1 prod-1=none prod-2=none")
	agentReports(t, ws, "canary-1", "app", true)
	agentReports(t, ws, "canary-2", "app", true)
	expect("the rest deployed after the canary", "canary-1=v1/v1 canary-2=v1/v1 prod-1=v1/v1 prod-2=v1/v1")
	agentReports(t, ws, "prod-1", "app", true)
	agentReports(t, ws, "prod-2", "app", true)
	readyCondition("the Bundle Ready on its four clusters", func(cur *fleet.Bundle, c *metav1.Condition) error {
		if c.Status != metav1.ConditionTrue {
			return fmt.Errorf("Ready %s %s: %s", c.Status, c.Reason, c.Message)
		}
		return nil
	})

	// A change: one canary cluster at a time (its maxUnavailable is 1),
	// the rest held on v1.
	change("v2")
	expect("the change on one canary cluster, staged on the other", "canary-1=v2/v2 canary-2=v1/v2 prod-1=v1/v1 prod-2=v1/v1")
	if got := content(t, ws, "prod-1", "app"); !strings.Contains(got, `version: "1"`) {
		t.Errorf("a held cluster's content changed:\n%s", got)
	}

	// The changed canary cluster fails: the rollout stops at the canary
	// and says so.
	agentReports(t, ws, "canary-1", "app", false)
	readyCondition("the rollout reported stopped at the canary", func(cur *fleet.Bundle, c *metav1.Condition) error {
		st := cur.Status
		if c.Status != metav1.ConditionFalse || c.Reason != fleet.PartitionUnavailableReason || st.Summary.NotReady != 1 {
			return fmt.Errorf("Ready %s %s: %s; summary %+v", c.Status, c.Reason, c.Message, st.Summary)
		}
		for _, want := range []string{`rollout stopped at partition "canary"`, `partition "canary": 2 of 2 cluster(s) unavailable, at most 1 allowed`, "0 of 1 replicas available", "3 cluster(s) wait"} {
			if !strings.Contains(c.Message, want) {
				return fmt.Errorf("message %q lacks %q", c.Message, want)
			}
		}
		if len(st.PartitionStatus) != 2 || st.PartitionStatus[0].Name != "canary" || st.PartitionStatus[0].Count != 2 || st.PartitionStatus[0].MaxUnavailable != 1 ||
			st.PartitionStatus[0].Unavailable != 2 || st.PartitionStatus[1].Name != "Unmatched" || st.PartitionStatus[1].Count != 2 ||
			st.UnavailablePartitions != 1 || st.MaxUnavailablePartitions != 0 || st.MaxUnavailable != 4 || st.Unavailable != 1 {
			return fmt.Errorf("rollout status %+v", st)
		}
		return nil
	})
	// That pass wrote nothing to the others: they stay where they were.
	if got, want := rolloutState(t, ws, ids, clusters...), "canary-1=v2/v2 canary-2=v1/v2 prod-1=v1/v1 prod-2=v1/v1"; got != want {
		t.Fatalf("while the canary fails: %s, want %s", got, want)
	}
	testenv.Consistently(t, 3*time.Second, "the rollout stays at the canary", func() error {
		if got, want := rolloutState(t, ws, ids, clusters...), "canary-1=v2/v2 canary-2=v1/v2 prod-1=v1/v1 prod-2=v1/v1"; got != want {
			return fmt.Errorf("clusters %s, want %s", got, want)
		}
		return nil
	})

	// A fix reaches the failing cluster at once; the others still wait.
	change("v3")
	expect("the fix on the failing canary only", "canary-1=v3/v3 canary-2=v1/v3 prod-1=v1/v1 prod-2=v1/v1")

	// It recovers: the rollout goes on, the second canary cluster and
	// (the canary tolerating one unavailable cluster) the last partition.
	agentReports(t, ws, "canary-1", "app", true)
	expect("the rollout past the canary", "canary-1=v3/v3 canary-2=v3/v3 prod-1=v3/v3 prod-2=v3/v3")
	for _, c := range clusters[1:] {
		agentReports(t, ws, c, "app", true)
	}
	readyCondition("the change Ready everywhere", func(cur *fleet.Bundle, c *metav1.Condition) error {
		if c.Status != metav1.ConditionTrue || cur.Status.UnavailablePartitions != 0 || cur.Status.Summary.Ready != 4 {
			return fmt.Errorf("Ready %s %s: %s; status %+v", c.Status, c.Reason, c.Message, cur.Status)
		}
		return nil
	})
	if got := content(t, ws, "prod-2", "app"); !strings.Contains(got, `version: "v3"`) {
		t.Errorf("the last partition's content:\n%s", got)
	}
}

func TestBundle_InvalidRolloutStrategyIsStalledBeforeAnyWrite(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-badrollout-")
	newCluster(t, ws, "c", map[string]string{"env": "prod"})
	b := &fleet.Bundle{}
	if err := yaml.UnmarshalStrict([]byte(strings.Replace(rolloutBundle, "maxUnavailable: 1", "maxUnavailable: one", 1)), b); err != nil {
		t.Fatal(err)
	}
	b.Namespace = ws
	if err := up.Create(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "Stalled RolloutStrategyInvalid", func() error {
		if err := up.Get(t.Context(), client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		s := meta.FindStatusCondition(b.Status.Conditions, fleet.StalledCondition)
		if s == nil || s.Reason != fleet.RolloutStrategyInvalidReason ||
			!strings.Contains(s.Message, `spec.rolloutStrategy.partitions[0].maxUnavailable: "one" is neither a number nor a percentage`) {
			return fmt.Errorf("conditions %+v", b.Status.Conditions)
		}
		return nil
	})
	if got := deployedTo(t, ws, "app"); len(got) != 0 {
		t.Errorf("an invalid rollout strategy deployed to %v", got)
	}
}
