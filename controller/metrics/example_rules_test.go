package metrics

import (
	"os"
	"regexp"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestExampleRulesUseMetricsThatExist: every fleet_ metric the example
// PrometheusRule names is one the controller exports (its PromQL is parsed
// by examples/monitoring/check, make check-monitoring).
func TestExampleRulesUseMetricsThatExist(t *testing.T) {
	raw, err := os.ReadFile("../../examples/monitoring/prometheusrule.yaml")
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	descs := make(chan *prometheus.Desc, 100)
	for _, c := range []prometheus.Collector{RegistrationSteps, AgentDeploys, AgentDeployDuration, BundleRenders, BundleRenderDuration,
		AgentRolloutClusters, AgentRolloutWave, AgentRolloutWaves, AgentRolloutHalted, clusters} {
		c.Describe(descs)
	}
	close(descs)
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	for d := range descs {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			exported[m[1]] = true
		}
	}
	used := regexp.MustCompile(`\bfleet_[a-z_]+\b`).FindAllString(string(raw), -1)
	if len(used) == 0 {
		t.Fatal("the example rules name no fleet metric")
	}
	for _, name := range used {
		if !exported[name] {
			t.Errorf("the example rules use %s, which the controller does not export", name)
		}
	}
}
