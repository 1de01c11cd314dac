package agent_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/renderer/renderertest"
)

// TestHelmInstall_AgentInitiatedAsDocumented installs the agent chart with
// the real helm CLI and a token's values file, as seed 001 documents
// (--set clientID, --set-string labels), in strict TLS mode; the agent then
// registers under that clientID with those labels. Both CLIs users have:
// Helm 4 (which installs with server-side apply) and Helm 3.
func TestHelmInstall_AgentInitiatedAsDocumented(t *testing.T) {
	for _, h := range renderertest.HelmCLIs(t) {
		t.Run(h.Name, func(t *testing.T) { helmInstallAgentInitiated(t, h) })
	}
}

func helmInstallAgentInitiated(t *testing.T, h renderertest.HelmCLI) {
	ds := env.Downstreams[0]
	ws := testenv.Namespace(t, up, "fleet-ws-")
	values := newToken(t, ws, "helm-tok", fleet.ClusterRegistrationTokenSpec{})
	dir := t.TempDir()
	valuesFile := filepath.Join(dir, "values.yaml")
	kubeconfig := filepath.Join(dir, "downstream.kubeconfig")
	if err := os.WriteFile(valuesFile, values, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kubeconfig, ds.Kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	agentNS := "agent-" + ws
	cmd := h.Command(t, "install", "fleet-agent", "../charts/fleet-agent",
		"--kubeconfig", kubeconfig, "-n", agentNS, "--create-namespace", "-f", valuesFile,
		"--set", "clientID=helm-"+ws, "--set-string", "labels.env=prod", "--set", "agentTLSMode=strict",
		"--set", "internal.systemNamespace="+agentNS)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s install: %v\n%s", h.Name, err, out.String())
	}
	a := startAgent(t, ds, agentNS, nil)
	_, name := waitRegistered(t, a)
	c := waitReady(t, ws, name, metav1.ConditionTrue, fleet.AgentHeartbeatReason)
	if c.Spec.ClientID != "helm-"+ws || c.Labels["env"] != "prod" {
		t.Errorf("cluster %s: clientID %q labels %v", name, c.Spec.ClientID, c.Labels)
	}
	cred := &corev1.Secret{}
	if err := ds.Client.Get(t.Context(), client.ObjectKey{Namespace: agentNS, Name: "fleet-agent"}, cred); err != nil {
		t.Fatal(err)
	}
	sa := &corev1.ServiceAccount{}
	if err := ds.Client.Get(t.Context(), client.ObjectKey{Namespace: agentNS, Name: "default"}, sa); err != nil {
		t.Fatal(err)
	}
	if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
		t.Error("the agent namespace's default ServiceAccount still automounts tokens")
	}
	if string(cred.Data["agentTLSMode"]) != "strict" {
		t.Errorf("TLS mode %q, want strict", cred.Data["agentTLSMode"])
	}
}
