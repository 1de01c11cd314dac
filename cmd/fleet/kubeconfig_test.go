package main

import (
	"strings"
	"testing"
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
