package deployer

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

// TestDeployer_DependsOnWithTheRequestIdentitysRights: the dependency check
// needs no right beyond a cluster's request identity (the fixture's: read
// its namespace's BundleDeployments and Secrets, write their status). A
// dependency not on the cluster keeps the deployment waiting, nothing
// applied; its BundleDeployment appearing and getting Ready lets the
// deployment through without waiting for the fallback retry.
func TestDeployer_DependsOnWithTheRequestIdentitysRights(t *testing.T) {
	f := newFixture(t)
	appNS := "deps-" + f.suffix
	bundleLabels := func(name string) func(*fleet.BundleDeployment) {
		return func(bd *fleet.BundleDeployment) {
			bd.Labels[fleet.BundleLabel] = name
			bd.Labels[fleet.BundleNamespaceLabel] = f.ws
		}
	}
	f.deploy("app", configMapYAML("app", "1"), fleet.BundleDeploymentOptions{DefaultNamespace: appNS}, bundleLabels("app"),
		func(bd *fleet.BundleDeployment) { bd.Spec.DependsOn = []fleet.BundleRef{{Name: "db"}} })
	bd, _ := f.waitBD("app", 30*time.Second, "waiting for db", func(bd *fleet.BundleDeployment) bool {
		c := condition(bd, fleet.DeployedCondition)
		return c.Reason == WaitingForDependencyReason && strings.Contains(c.Message, "db is not deployed to this cluster")
	})
	if bd.Status.Display.State != string(fleet.WaitApplied) || bd.Status.Display.Deployed != WaitingForDependencyReason {
		t.Errorf("display %+v", bd.Status.Display)
	}
	if f.exists(cm(appNS, "app")) {
		t.Fatal("app applied while its dependency is not on the cluster")
	}

	dbID := f.deploy("db", configMapYAML("db", "1"), fleet.BundleDeploymentOptions{DefaultNamespace: appNS}, bundleLabels("db"))
	f.waitBD("db", 30*time.Second, "Ready", readyFor(dbID))
	_, took := f.waitBD("app", 10*time.Second, "applied once db is Ready", func(bd *fleet.BundleDeployment) bool {
		return bd.Status.AppliedDeploymentID == bd.Spec.DeploymentID
	})
	t.Logf("app applied %v after db was seen Ready", took)
	if !f.exists(cm(appNS, "app")) {
		t.Fatal("app not applied")
	}
}

// TestDeployer_InvalidComparePatchesSayWhatToFix: a comparePatch the agent
// cannot use is reported on Monitored (MonitorFailed) with its index and
// what is wrong, and not retried until the spec changes; fixing it clears it.
func TestDeployer_InvalidComparePatchesSayWhatToFix(t *testing.T) {
	f := newFixture(t)
	appNS := "cp-" + f.suffix
	bad := fleet.BundleDeploymentOptions{DefaultNamespace: appNS, Diff: &fleet.DiffOptions{ComparePatches: []fleet.ComparePatch{
		{APIVersion: "v1", Kind: "ConfigMap", Name: "x", Namespace: appNS, Operations: []fleet.Operation{{Op: "delete", Path: "/data"}}},
	}}}
	f.deploy("x", configMapYAML("x", "1"), bad)
	f.waitBD("x", 30*time.Second, "MonitorFailed naming the patch", func(bd *fleet.BundleDeployment) bool {
		c := condition(bd, fleet.MonitoredCondition)
		return c.Status == metav1.ConditionFalse && c.Reason == MonitorFailedReason &&
			strings.Contains(c.Message, `diff.comparePatches[0].operations[0]: op "delete"`)
	})
	good := bad
	good.Diff = &fleet.DiffOptions{ComparePatches: []fleet.ComparePatch{
		{APIVersion: "v1", Kind: "ConfigMap", Name: "x", Namespace: appNS, Operations: []fleet.Operation{{Op: "remove", Path: "/data"}}},
	}}
	id := f.deploy("x", configMapYAML("x", "1"), good)
	f.waitBD("x", 30*time.Second, "Ready once the patch is fixed", readyFor(id))
}
