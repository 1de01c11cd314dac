package controller_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gitops-fleet/fleet/dev/testenv"
)

func setControllerConfig(t *testing.T, ctx context.Context, doc string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "cattle-fleet-system"}}
	if err := up.Create(ctx, ns); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "cattle-fleet-system", Name: "fleet-controller"}}
	err := up.Get(ctx, client.ObjectKeyFromObject(cm), cm)
	cm.Data = map[string]string{"config": doc}
	if err != nil {
		if err := up.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := up.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
}

// TestConfig_HotReloadRedeploysOnceAndRejectsInvalidConfig changes the
// agents' upstream URL in the fleet-controller ConfigMap (every
// manager-initiated agent is redeployed with it, once), then writes an
// invalid document (reported, last good configuration kept, nothing
// redeployed).
func TestConfig_HotReloadRedeploysOnceAndRejectsInvalidConfig(t *testing.T) {
	ds := env.Downstreams[1]
	c := managerCluster(t, ds, nil)
	waitImported(t, c, 0)
	const original = `{"apiServerURL": "https://upstream.example.com:6443", "apiServerCA": "dXBzdHJlYW0tY2E="}`
	t.Cleanup(func() {
		setControllerConfig(t, context.Background(), original)
		testenv.Eventually(t, 30*time.Second, "original config back", func() error {
			if got := ctrl.Config.Get().APIServerURL; got != "https://upstream.example.com:6443" {
				return fmt.Errorf("apiServerURL %q", got)
			}
			return nil
		})
	})

	setControllerConfig(t, t.Context(), `{"apiServerURL": "https://upstream-moved.example.com:6443", "apiServerCA": "dXBzdHJlYW0tY2E="}`)
	testenv.Eventually(t, 60*time.Second, "agent redeployed with the new upstream URL", func() error {
		boot := &corev1.Secret{}
		if err := ds.Client.Get(t.Context(), client.ObjectKey{Namespace: c.Spec.AgentNamespace, Name: "fleet-agent-bootstrap"}, boot); err != nil {
			return err
		}
		if u := string(boot.Data["apiServerURL"]); u != "https://upstream-moved.example.com:6443" {
			return fmt.Errorf("bootstrap apiServerURL %q", u)
		}
		if got := getCluster(t, c); got.Status.APIServerURL != "https://upstream-moved.example.com:6443" {
			return fmt.Errorf("status.apiServerURL %q", got.Status.APIServerURL)
		}
		return nil
	})
	if n := waitEvents(t, c, "AgentRedeployed", 1); n != 1 {
		t.Errorf("AgentRedeployed events: %d, want 1", n)
	}

	setControllerConfig(t, t.Context(), `{"apiServerURL": "https://other.example.com", "agentTLSMode": "lax"}`)
	testenv.Eventually(t, 30*time.Second, "invalid config reported on /readyz", func() error {
		if err := ctrl.Config.ReadyCheck(nil); err == nil || !strings.Contains(err.Error(), `agentTLSMode "lax"`) {
			return fmt.Errorf("ready check: %v", err)
		}
		return nil
	})
	if got := ctrl.Config.Get().APIServerURL; got != "https://upstream-moved.example.com:6443" {
		t.Errorf("an invalid document replaced the configuration in force: apiServerURL %q", got)
	}
	time.Sleep(time.Second)
	if n := countEvents(t, c, "AgentRedeployed"); n != 1 {
		t.Errorf("an invalid config redeployed the agent: %d redeploys", n)
	}
	testenv.Eventually(t, 30*time.Second, "a ConfigInvalid event on the ConfigMap", func() error {
		evs := &corev1.EventList{}
		if err := up.List(t.Context(), evs, client.InNamespace("cattle-fleet-system")); err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Reason == "ConfigInvalid" && strings.Contains(e.Message, "agentTLSMode") {
				return nil
			}
		}
		return fmt.Errorf("no ConfigInvalid event among %d", len(evs.Items))
	})
}
