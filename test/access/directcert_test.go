package access_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/kubeconfig"
)

// TestKubeconfig_WarnsOfADirectCertificateThatDoesNotCoverTheURL: a user
// who may only use the proxy of a Cluster (no right to read the Cluster)
// runs `fleet kubeconfig` for a Cluster whose direct endpoint's url is a
// node IP its certificate does not name: the direct context is written as
// before (no error: the exit code is unchanged) and a warning names the
// host, the certificate's names and who fixes it. Once the certificate
// names the host, no such warning.
func TestKubeconfig_WarnsOfADirectCertificateThatDoesNotCoverTheURL(t *testing.T) {
	// Names of its own, so the test runs again in one suite (go test -count).
	cluster := fmt.Sprintf("direct-cert-%d", time.Now().UnixNano()%1_000_000)
	agentIdentity(t, cluster, "reg-"+cluster, cluster)
	userName, _, userTok := upstreamUser(t, "direct-cert-users", "dana-"+cluster, cluster)
	grantProxy(t, cluster+"-dana", userName, cluster, "get", "create", "update", "patch", "delete")
	const url = "https://172.18.0.3:30443"
	enableDirect(t, cluster, url, []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"))
	report := func(names ...string) {
		t.Helper()
		c := &fleet.Cluster{}
		must(t, env.Upstream.Client.Get(t.Context(), client.ObjectKey{Namespace: workspace, Name: cluster}, c))
		// What the agent reports (status.agent, its only field).
		c.Status.Agent.DirectEndpointCertificateNames = names
		must(t, env.Upstream.Client.Status().Update(t.Context(), c))
	}
	generate := func() ([]string, []byte) {
		t.Helper()
		caller := writeKubeconfig(t, env.Upstream.ConfigForToken(userTok), nil)
		data, warnings, err := kubeconfig.Generate(t.Context(), kubeconfig.Request{Kubeconfig: caller, Cluster: kubeconfig.ClusterRef{Workspace: workspace, Name: cluster}})
		must(t, err)
		return warnings, data
	}
	mismatchWarning := func(warnings []string) string {
		for _, w := range warnings {
			if strings.Contains(w, "x509") {
				return w
			}
		}
		return ""
	}

	report("dev-1.example.com", "fleet-agent-direct.cattle-fleet-system.svc")
	var warnings []string
	var data []byte
	// fleet-proxy reads the Cluster from its cache.
	testenv.Eventually(t, 10*time.Second, "fleet kubeconfig warns of the certificate", func() error {
		if warnings, data = generate(); mismatchWarning(warnings) == "" {
			return fmt.Errorf("warnings %q", warnings)
		}
		return nil
	})
	w := mismatchWarning(warnings)
	for _, s := range []string{cluster + "-direct", `"172.18.0.3"`, "dev-1.example.com", "DirectEndpoint", "spec.agentDirectEndpoint.url"} {
		if !strings.Contains(w, s) {
			t.Errorf("warning %q does not say %s (all: %q)", w, s, warnings)
		}
	}
	printed, err := clientcmd.Load(data)
	must(t, err)
	if c := printed.Clusters[cluster+"-direct"]; c == nil || c.Server != url {
		t.Fatalf("the direct context is not written as before: %v", printed.Clusters)
	}

	report("dev-1.example.com", "172.18.0.3")
	testenv.Eventually(t, 10*time.Second, "no certificate warning once it names the host", func() error {
		if warnings, _ = generate(); mismatchWarning(warnings) != "" {
			return fmt.Errorf("warnings %q", warnings)
		}
		return nil
	})
	if !strings.Contains(fmt.Sprint(warnings), cluster+"-direct reaches Cluster") {
		t.Errorf("no direct context written: %q", warnings)
	}
}
