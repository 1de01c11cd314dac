package agent_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/controlplane"
	"github.com/gitops-fleet/fleet/dev/testenv"
)

const appChart = `apiVersion: v2
name: app
version: 0.1.0
`

const appTemplates = `apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-config
data:
  color: {{ .Values.color | quote }}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-extra
data:
  keep: "me"
`

func configMap(t *testing.T, ds *controlplane.ControlPlane, ns, name string) (*corev1.ConfigMap, error) {
	t.Helper()
	cm := &corev1.ConfigMap{}
	err := ds.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, cm)
	return cm, err
}

func updateBundle(t *testing.T, ws, name string, mutate func(*fleet.Bundle)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		b := &fleet.Bundle{}
		if err := up.Get(t.Context(), client.ObjectKey{Namespace: ws, Name: name}, b); err != nil {
			return err
		}
		mutate(b)
		return up.Update(t.Context(), b)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func bundleStatus(t *testing.T, ws, name string) *fleet.Bundle {
	t.Helper()
	b := &fleet.Bundle{}
	if err := up.Get(t.Context(), client.ObjectKey{Namespace: ws, Name: name}, b); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestBundle_EndToEnd: a Bundle of a Helm chart with a kustomize overlay
// reaches exactly the selected clusters through their agents, follows label
// changes, prunes what leaves it, and reports and corrects drift.
func TestBundle_EndToEnd(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-e2e-")
	values := newToken(t, ws, "tok", fleet.ClusterRegistrationTokenSpec{})
	type member struct {
		ds      *controlplane.ControlPlane
		agentNS string
		name    string
	}
	var members []member
	for i, env := range []string{"prod", "dev"} {
		ds := envDownstream(i)
		agentNS := fmt.Sprintf("agent-%s-%d", ws, i)
		helmInstall(t, ds, agentNS, values, map[string]any{"clientID": fmt.Sprintf("%s-%d", ws, i), "labels": map[string]any{"env": env}})
		a := startAgent(t, ds, agentNS, nil)
		_, name := waitRegistered(t, a)
		members = append(members, member{ds, agentNS, name})
	}
	prod, dev := members[0], members[1]
	appNS := "app-" + ws

	b := &fleet.Bundle{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "app"},
		Spec: fleet.BundleSpec{
			BundleDeploymentOptions: fleet.BundleDeploymentOptions{
				DefaultNamespace: appNS,
				Helm:             &fleet.HelmOptions{Chart: "chart", Values: &fleet.GenericMap{Data: map[string]any{"color": "blue"}}},
				Kustomize:        &fleet.KustomizeOptions{Dir: "overlay"},
			},
			Resources: []fleet.BundleResource{
				{Name: "chart/Chart.yaml", Content: appChart},
				{Name: "chart/templates/all.yaml", Content: appTemplates},
				{Name: "overlay/kustomization.yaml", Content: "labels:\n- pairs:\n    team: app\n"},
			},
			Targets: []fleet.BundleTarget{{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}},
		},
	}
	if err := up.Create(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "app on the prod cluster", func() error {
		cm, err := configMap(t, prod.ds, appNS, "app-config")
		if err != nil {
			return err
		}
		if cm.Data["color"] != "blue" || cm.Labels["team"] != "app" {
			return fmt.Errorf("config %v labels %v", cm.Data, cm.Labels)
		}
		return nil
	})
	if _, err := configMap(t, dev.ds, appNS, "app-config"); !apierrors.IsNotFound(err) {
		t.Errorf("app on the dev cluster, which no target selects: %v", err)
	}
	testenv.Eventually(t, 30*time.Second, "bundle Ready 1/1", func() error {
		if got := bundleStatus(t, ws, "app"); got.Status.Display.ReadyClusters != "1/1" {
			return fmt.Errorf("readyClusters %q", got.Status.Display.ReadyClusters)
		}
		return nil
	})

	// A resource leaves the Bundle: pruned downstream.
	updateBundle(t, ws, "app", func(b *fleet.Bundle) {
		b.Spec.Resources[1].Content = strings.SplitN(appTemplates, "---", 2)[0]
	})
	testenv.Eventually(t, 30*time.Second, "app-extra pruned", func() error {
		if _, err := configMap(t, prod.ds, appNS, "app-extra"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there: %v", err)
		}
		return nil
	})

	// A manual edit downstream: reported as Modified, then corrected. The
	// edit is made again while it is not there: an apply of the pruning
	// update still under way (the Bundle's new content reaches the agent in
	// more than one step) may rightly overwrite it once.
	testenv.Eventually(t, 60*time.Second, "drift reported on the Bundle", func() error {
		cm, err := configMap(t, prod.ds, appNS, "app-config")
		if err != nil {
			return err
		}
		if cm.Data["color"] != "red" {
			cm.Data["color"] = "red"
			if err := prod.ds.Client.Update(t.Context(), cm); err != nil {
				return fmt.Errorf("editing app-config: %w", err)
			}
		}
		got := bundleStatus(t, ws, "app")
		if got.Status.Summary.Modified != 1 || len(got.Status.Summary.NonReadyResources) == 0 ||
			len(got.Status.Summary.NonReadyResources[0].ModifiedStatus) == 0 || got.Status.Summary.NonReadyResources[0].ModifiedStatus[0].Name != "app-config" {
			return fmt.Errorf("summary %+v", got.Status.Summary)
		}
		return nil
	})
	updateBundle(t, ws, "app", func(b *fleet.Bundle) { b.Spec.CorrectDrift = &fleet.CorrectDrift{Enabled: true} })
	testenv.Eventually(t, 30*time.Second, "drift corrected", func() error {
		cm, err := configMap(t, prod.ds, appNS, "app-config")
		if err != nil || cm.Data["color"] != "blue" {
			return fmt.Errorf("color %v (%v)", cm.Data, err)
		}
		return nil
	})

	// Labels change: the app moves from prod to dev.
	updateCluster(t, ws, prod.name, func(c *fleet.Cluster) { c.Labels["env"] = "staging" })
	updateCluster(t, ws, dev.name, func(c *fleet.Cluster) { c.Labels["env"] = "prod" })
	testenv.Eventually(t, 60*time.Second, "app moved to the other cluster", func() error {
		if _, err := configMap(t, dev.ds, appNS, "app-config"); err != nil {
			return fmt.Errorf("not on dev: %v", err)
		}
		if _, err := configMap(t, prod.ds, appNS, "app-config"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still on prod: %v", err)
		}
		return nil
	})
}

func envDownstream(i int) *controlplane.ControlPlane { return env.Downstreams[i%len(env.Downstreams)] }
