package main

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/renderer"
)

// TestFleetChart_ConfigIsAcceptedByTheController keeps charts/fleet and the
// controller's config parser in step: every value the chart writes must be
// one the controller reads.
func TestFleetChart_ConfigIsAcceptedByTheController(t *testing.T) {
	ch, err := renderer.LoadChartDir("../../charts/fleet")
	if err != nil {
		t.Fatal(err)
	}
	values := []byte(`apiServerURL: https://fleet.example.com:6443
apiServerCA: "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
agent:
  tlsMode: strict
  checkinInterval: 45s
  imagePullSecrets: [regcred]
  proxy: {httpsProxy: "http://proxy:3128"}
registrationTokenTTL: {required: true}
capi: {namespaces: [capi-system], clusterSelector: "fleet=enabled"}
bundleRendering: {maxSize: 64Mi, timeout: 1m, concurrency: 4}
`)
	out, err := renderer.Render(renderer.Input{Chart: ch, ReleaseName: "fleet", Namespace: "cattle-fleet-system", Values: values})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := out.Objects()
	if err != nil {
		t.Fatal(err)
	}
	var cm *unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "ConfigMap" && o.GetName() == config.ConfigMapName {
			cm = o
		}
	}
	if cm == nil {
		t.Fatal("charts/fleet renders no fleet-controller ConfigMap")
	}
	data, _, _ := unstructured.NestedString(cm.Object, "data", config.ConfigMapKey)
	cfg, err := config.Parse([]byte(data))
	if err != nil {
		t.Fatalf("the controller rejects the chart's config: %v\n%s", err, data)
	}
	if cfg.GetAgentTLSMode() != "strict" || cfg.GetAgentCheckinInterval().String() != "45s" ||
		string(cfg.APIServerCA) != "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n" ||
		!cfg.RegistrationTokenTTLRequired || cfg.AgentProxy.HTTPSProxy != "http://proxy:3128" ||
		len(cfg.AgentImagePullSecrets) != 1 || cfg.GetAgentImage() != "gitops-fleet/fleet:0.1.0" ||
		!cfg.CAPISelects("capi-system", map[string]string{"fleet": "enabled"}) || cfg.CAPISelects("other", map[string]string{"fleet": "enabled"}) {
		t.Errorf("config lost values: %+v", cfg)
	}
	// Set values, and the chart's defaults, which are the controller's.
	if cfg.GetBundleMaxSize() != 64<<20 || cfg.GetBundleRenderTimeout().String() != "1m0s" || cfg.GetBundleRenderConcurrency() != 4 ||
		cfg.GetBundleMaxResourceSize() != config.DefaultBundleMaxResourceSize || cfg.GetBundleRenderMemoryLimit() != config.DefaultBundleRenderMemoryLimit {
		t.Errorf("bundle rendering limits: %s", data)
	}
}
