package e2e

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/gitops-fleet/fleet/dev/devenv"
)

// testRenderer: the chart-installed renderer (Deployment fleet-renderer)
// rendered the example Bundle, its pods have no ServiceAccount token
// mounted, and a request that reaches it without the controller's token is
// refused. Whether the NetworkPolicy is enforced depends on the CNI: the dev
// clusters' bridge plugin enforces none, so this test does not claim it.
func testRenderer(t *testing.T) {
	cs := clientset(t, "upstream")
	var pods []corev1.Pod
	must(t, devenv.Poll(t.Context(), time.Minute, func() error {
		d, err := cs.AppsV1().Deployments(agentNS).Get(t.Context(), "fleet-renderer", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := rolledOut(d); err != nil {
			return err
		}
		list, err := cs.CoreV1().Pods(agentNS).List(t.Context(), metav1.ListOptions{LabelSelector: "app=fleet-renderer"})
		if err != nil {
			return err
		}
		pods = list.Items
		return nil
	}))
	for _, p := range pods {
		if p.Spec.AutomountServiceAccountToken == nil || *p.Spec.AutomountServiceAccountToken {
			t.Errorf("pod %s: automountServiceAccountToken is not false", p.Name)
		}
		for _, v := range p.Spec.Volumes {
			if v.Projected != nil || strings.HasPrefix(v.Name, "kube-api-access-") {
				t.Errorf("pod %s: volume %s could hold a ServiceAccount token", p.Name, v.Name)
			}
		}
		for _, c := range p.Spec.Containers {
			for _, m := range c.VolumeMounts {
				if strings.HasPrefix(m.MountPath, "/var/run/secrets/kubernetes.io") {
					t.Errorf("pod %s: %s mounted at %s", p.Name, m.Name, m.MountPath)
				}
			}
		}
		if !podReady(&p) {
			t.Errorf("pod %s is not ready", p.Name)
		}
	}

	// The controller is told the renderer's URL, and the example Bundle
	// (Ready on dev-1 and dev-2 by now) was rendered there.
	ctrl, err := cs.AppsV1().Deployments(agentNS).Get(t.Context(), "fleet-controller", metav1.GetOptions{})
	must(t, err)
	if !slices.Contains(ctrl.Spec.Template.Spec.Containers[0].Args, "--renderer-url=https://fleet-renderer."+agentNS+".svc:8443") {
		t.Errorf("controller args %v: no --renderer-url", ctrl.Spec.Template.Spec.Containers[0].Args)
	}
	must(t, devenv.Poll(t.Context(), time.Minute, func() error {
		var logs strings.Builder
		for _, p := range pods {
			b, err := cs.CoreV1().Pods(agentNS).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(t.Context())
			if err != nil {
				return err
			}
			logs.Write(b)
		}
		for _, line := range strings.Split(logs.String(), "\n") {
			if strings.Contains(line, `"rendered"`) && strings.Contains(line, `"bundle":"hello"`) {
				return nil
			}
		}
		return fmt.Errorf("no render of Bundle hello in the renderer's log:\n%s", logs.String())
	}))

	// A caller without the controller's token: the API server's service
	// proxy reaches the pod (it forwards no credential of its caller), and
	// the renderer itself answers 401.
	cfg, err := cluster("upstream").RESTConfig()
	must(t, err)
	hc, err := rest.HTTPClientFor(cfg)
	must(t, err)
	body := `{"name":"x","resources":[{"name":"cm.yaml","content":"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"}],"options":{}}`
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost,
		cfg.Host+"/api/v1/namespaces/"+agentNS+"/services/https:fleet-renderer:8443/proxy/v1/render", strings.NewReader(body))
	must(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	must(t, err)
	raw, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(raw), "only the fleet controller may call the renderer") {
		t.Errorf("a request without the controller's token: %s %s, want 401 from the renderer", resp.Status, raw)
	}

	np, err := cs.NetworkingV1().NetworkPolicies(agentNS).Get(t.Context(), "fleet-renderer", metav1.GetOptions{})
	must(t, err)
	if len(np.Spec.Egress) != 0 || !slices.Contains(np.Spec.PolicyTypes, "Egress") {
		t.Errorf("NetworkPolicy fleet-renderer allows egress: %+v", np.Spec)
	}
	t.Log("NetworkPolicy fleet-renderer is installed; the dev clusters' bridge CNI does not enforce NetworkPolicy, so its effect is not checked here")
}
