package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/controlplane"
	"github.com/gitops-fleet/fleet/dev/testenv"
)

// TestKubeconfig_BadClusterIsAClearError: the command refuses a --cluster
// that is not <workspace>/<name> before it reads any kubeconfig.
func TestKubeconfig_BadClusterIsAClearError(t *testing.T) {
	t.Setenv("KUBECONFIG", "/nonexistent/kubeconfig")
	for _, tt := range []struct{ args []string }{
		{[]string{"kubeconfig"}},
		{[]string{"kubeconfig", "--cluster", "dev-1"}},
		{[]string{"kubeconfig", "--cluster", "/dev-1"}},
		{[]string{"kubeconfig", "--cluster", "fleet-default/"}},
		{[]string{"kubeconfig", "--cluster", "fleet-default/dev-1", "extra"}},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			stdout, _, err := runCLIStderr(t, tt.args...)
			if err == nil {
				t.Fatalf("want an error, got output %q", stdout)
			}
			if len(stdout) != 0 {
				t.Errorf("printed %q with an error", stdout)
			}
			msg := err.Error()
			if !strings.Contains(msg, "cluster") && !strings.Contains(msg, `unknown command "extra"`) {
				t.Errorf("error %q does not say what is wrong", msg)
			}
			if len(tt.args) == 3 && !strings.Contains(msg, "--cluster: cluster "+`"`+tt.args[2]+`": want <workspace>/<name>`) {
				t.Errorf("error %q: want it to name the flag, the value and the form", msg)
			}
		})
	}
}

// TestKubeconfig_OutputIsAFormatAndTheFileIsOutputFile: against a real
// upstream holding the Cluster, -o picks the format (yaml, the default, or
// json, the same kubeconfig), --output-file writes the file (mode 0600),
// and the older -o FILE still writes it, with a deprecation warning that
// names the new flag. Pointed at a cluster that is not the fleet upstream
// (a downstream API server, without fleet's CRDs), fleet kubeconfig and
// fleet rollout both ask whether the context is the upstream.
func TestKubeconfig_OutputIsAFormatAndTheFileIsOutputFile(t *testing.T) {
	env := testenv.StartControlPlanes(t, controlplane.Options{Downstreams: 1})
	c := env.Upstream.Client
	if err := c.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fleet-default"}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if err := c.Create(t.Context(), &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "dev-1", Namespace: "fleet-default"}}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	kc := writeFile(t, dir, "upstream", string(env.Upstream.Kubeconfig))
	args := []string{"kubeconfig", "--kubeconfig", kc, "--cluster", "fleet-default/dev-1", "--no-direct"}

	code, yamlOut, stderr := runMain(t, args...)
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	code, jsonOut, stderr := runMain(t, append(args, "-o", "json")...)
	if code != 0 || stderr != "" {
		t.Fatalf("-o json: exit %d, stderr %q", code, stderr)
	}
	fromYAML, err := clientcmd.Load([]byte(yamlOut))
	if err != nil {
		t.Fatal(err)
	}
	fromJSON, err := clientcmd.Load([]byte(jsonOut))
	if err != nil || !json.Valid([]byte(jsonOut)) {
		t.Fatalf("-o json is not a JSON kubeconfig: %v\n%s", err, jsonOut)
	}
	if !equality.Semantic.DeepEqual(fromYAML, fromJSON) || fromJSON.CurrentContext != "dev-1" ||
		!strings.HasSuffix(fromJSON.Clusters["dev-1"].Server, "/apis/proxy.fleet.cattle.io/v1alpha1/namespaces/fleet-default/clusters/dev-1/proxy") {
		t.Errorf("-o json and -o yaml differ, or not the Cluster's proxy:\n%s\n%s", yamlOut, jsonOut)
	}

	file := filepath.Join(dir, "dev-1")
	if code, stdout, stderr := runMain(t, append(args, "--output-file", file)...); code != 0 || stdout != "" || stderr != "" {
		t.Fatalf("--output-file: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != yamlOut {
		t.Errorf("--output-file wrote %q (%v), want what stdout shows", b, err)
	}
	if st, _ := os.Stat(file); st.Mode().Perm() != 0o600 {
		t.Errorf("--output-file mode %v, want 0600", st.Mode().Perm())
	}

	old := filepath.Join(dir, "old")
	code, stdout, stderr := runMain(t, append(args, "-o", old)...)
	if code != 0 || stdout != "" || !strings.Contains(stderr, "warning: -o FILE is deprecated") || !strings.Contains(stderr, "--output-file "+old) {
		t.Errorf("-o FILE: exit %d, stdout %q, stderr %q; want the file written and a deprecation warning naming --output-file", code, stdout, stderr)
	}
	if b, err := os.ReadFile(old); err != nil || string(b) != yamlOut {
		t.Errorf("-o FILE wrote %q (%v)", b, err)
	}
	if code, _, stderr := runMain(t, append(args, "-o", "xml", "--output-file", file)...); code != 2 || !strings.Contains(stderr, `-o/--output must be yaml or json, not "xml" (the file is --output-file)`) {
		t.Errorf("-o xml --output-file: exit %d %q, want a usage error", code, stderr)
	}

	t.Run("a context that is not the fleet upstream", func(t *testing.T) {
		down := writeFile(t, dir, "downstream", string(env.Downstreams[0].Kubeconfig))
		const question = "is your kubeconfig's context the fleet upstream (management) cluster?"
		code, _, stderr := runMain(t, "kubeconfig", "--kubeconfig", down, "--cluster", "fleet-default/dev-1", "--no-direct")
		if code != 1 || !strings.Contains(stderr, "does not serve fleet.cattle.io Clusters") || !strings.Contains(stderr, question) || !strings.Contains(stderr, `(context "`) {
			t.Errorf("fleet kubeconfig: exit %d, stderr %q", code, stderr)
		}
		code, _, stderr = runMain(t, "rollout", "status", "--kubeconfig", down)
		if code != 2 || !strings.Contains(stderr, "does not serve fleet.cattle.io AgentRollouts") || !strings.Contains(stderr, question) || !strings.Contains(stderr, `(context "`) {
			t.Errorf("fleet rollout status: exit %d, stderr %q; want 2 and the question", code, stderr)
		}
	})
}
