package agentvalues

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/renderer/renderertest"
)

// The fixtures are the renderer's: the controller configuration and the
// Clusters its golden agent renders are made from.

func loadConfig(t testing.TB) *config.Config {
	t.Helper()
	return renderertest.LoadConfig(t, "../testdata/config.yaml")
}

func TestValues_BadInputNamesTheField(t *testing.T) {
	base := renderertest.LoadCluster(t, "../testdata/clusters/01-minimal-manager.yaml")
	cases := []struct {
		name   string
		mutate func(c *fleet.Cluster, cfg *config.Config)
		want   string
	}{
		{"env var with =", func(c *fleet.Cluster, _ *config.Config) {
			c.Spec.AgentEnvVars = []corev1.EnvVar{{Name: "A=B", Value: "x"}}
		}, `spec.agentEnvVars[0].name "A=B" is not a valid environment variable name`},
		{"empty env var name", func(c *fleet.Cluster, _ *config.Config) {
			c.Spec.AgentEnvVars = []corev1.EnvVar{{Name: "OK"}, {Name: ""}}
		}, `spec.agentEnvVars[1].name "" is empty`},
		{"pdb with both bounds", func(c *fleet.Cluster, _ *config.Config) {
			c.Spec.AgentSchedulingCustomization = &fleet.AgentSchedulingCustomization{PodDisruptionBudget: &fleet.PodDisruptionBudgetSpec{MinAvailable: "1", MaxUnavailable: "1"}}
		}, "set either minAvailable or maxUnavailable, not both"},
		{"no api server url", func(_ *fleet.Cluster, cfg *config.Config) { cfg.APIServerURL = "" },
			"set apiServerURL in the fleet-controller config, or key apiServerURL in the kubeconfig Secret"},
		{"image without tag", func(_ *fleet.Cluster, cfg *config.Config) { cfg.AgentImage = "registry:5000/fleet" },
			`agentImage "registry:5000/fleet" must be repository:tag`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := base.DeepCopy()
			cfg := loadConfig(t)
			tc.mutate(c, cfg)
			_, err := Offline(c, cfg, true)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// What the import turns into a condition reason is told by the error's
// type, not its text, even among other problems.
func TestValues_UpstreamURLProblemsAreTyped(t *testing.T) {
	c := renderertest.LoadCluster(t, "../testdata/clusters/02-env-vars.yaml")
	c.Spec.AgentEnvVars = append(c.Spec.AgentEnvVars, corev1.EnvVar{Name: "apiServerURL=x"})
	cfg := loadConfig(t)
	cfg.APIServerURL = ""
	_, err := ForCluster(c, cfg, OfflineBootstrap(c))
	if !errors.Is(err, ErrNoAPIServerURL) {
		t.Errorf("no URL: %v, want ErrNoAPIServerURL", err)
	}
	cfg.APIServerURL = "http://upstream.example.com"
	_, err = ForCluster(c, cfg, OfflineBootstrap(c))
	var insecure *config.InsecureAPIServerURLError
	if !errors.As(err, &insecure) || errors.Is(err, ErrNoAPIServerURL) || insecure.URL != cfg.APIServerURL {
		t.Errorf("plain http URL: %v, want an InsecureAPIServerURLError", err)
	}
	// An env var named after the key is a problem of its own, not a URL one.
	cfg.APIServerURL = "https://upstream.example.com"
	_, err = ForCluster(c, cfg, OfflineBootstrap(c))
	if err == nil || errors.Is(err, ErrNoAPIServerURL) || errors.As(err, &insecure) {
		t.Errorf("bad env var only: %v", err)
	}
}

func TestShortDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Minute: "1m", 90 * time.Second: "1m30s", time.Hour: "1h", 2*time.Hour + 30*time.Minute: "2h30m",
		time.Hour + time.Second: "1h0m1s", 15 * time.Second: "15s", 1500 * time.Millisecond: "1.5s",
	} {
		if got := ShortDuration(d); got != want {
			t.Errorf("ShortDuration(%s) = %q, want %q", d, got, want)
		}
		if back, err := time.ParseDuration(want); err != nil || back != d {
			t.Errorf("%q does not parse back to %s", want, d)
		}
	}
}

// The hash of the values decides whether the controller pushes a
// manager-initiated agent again (status.agentValuesHash): a change of the
// values' JSON encoding (a field renamed, reordered, given omitempty) would
// push every agent once more at the next controller upgrade, with a fresh
// bootstrap and a new registration. These are the hashes of the values as
// released; a change here must be deliberate.
func TestValues_HashIsStable(t *testing.T) {
	for file, want := range map[string]string{
		"01-minimal-manager.yaml": "ba194c7b6331b251a9f3bce918f7c54a4b2b5c3e16b3f84dd182e3ee44af81d5",
		"08-scheduling.yaml":      "e1fcbc5f9a4e298ec50150b51fd332aba36dd9923de781fdd272ce402be51ba5",
		"10-agent-initiated.yaml": "774b1330777e22947e9856a4cb62b08f483db362c2436ac3175d1c17635fafec",
	} {
		c := renderertest.LoadCluster(t, "../testdata/clusters/"+file)
		v, err := Offline(c, loadConfig(t), c.Spec.KubeConfigSecret != "")
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := v.Hash(); got != want {
			t.Errorf("%s: values hash %s, want %s: every agent would be pushed again", file, got, want)
		}
	}
}
