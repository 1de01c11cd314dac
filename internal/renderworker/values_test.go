package renderworker

import (
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/renderer"
	"github.com/gitops-fleet/fleet/renderer/bundlefiles"
)

// valuesTemplateOptions are chartOptions whose color is a `${ }` template.
func valuesTemplateOptions(template string) fleet.BundleDeploymentOptions {
	opts := *chartOptions.DeepCopy()
	opts.Helm.Values = &fleet.GenericMap{Data: map[string]any{"color": template}}
	return opts
}

var eu = renderer.ContextOf(&fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ws", Name: "eu-1", Labels: map[string]string{"color": "green"}}})

// TestPool_ValuesTemplatesRenderInTheWorker: `${ }` values are templated in
// the worker with the cluster's context the request carries.
func TestPool_ValuesTemplatesRenderInTheWorker(t *testing.T) {
	out, err := testPool(t, nil).RenderFor(t.Context(), "web", chartResources(configMapTemplate), valuesTemplateOptions("${ .ClusterLabels.color }-${ .ClusterName }"), &renderer.ClusterValues{Cluster: eu})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out.YAML), "color: green-eu-1") {
		t.Errorf("rendered\n%s\nwant color green-eu-1", out.YAML)
	}
}

// TestPool_ValuesTemplatesCannotReadTheEnvironment: env and expandenv are
// not there; the worker's environment (which the renderer's is) never
// reaches a Bundle's values. The failure is the Bundle's, with its reason.
func TestPool_ValuesTemplatesCannotReadTheEnvironment(t *testing.T) {
	t.Setenv("FLEET_TEST_SECRET", "s3cr3t") // the worker inherits it
	for _, tmpl := range []string{`${ env "FLEET_TEST_SECRET" }`, `${ expandenv "$FLEET_TEST_SECRET" }`, `${ getHostByName "localhost" }`} {
		_, err := testPool(t, nil).RenderFor(t.Context(), "web", chartResources(configMapTemplate), valuesTemplateOptions(tmpl), &renderer.ClusterValues{Cluster: eu})
		var re *RenderError
		if !errors.As(err, &re) || re.Reason != fleet.ValuesTemplateFailedReason || !strings.Contains(re.Message, "not defined") || strings.Contains(re.Message, "s3cr3t") {
			t.Errorf("%s: got %v, want %s: function not defined", tmpl, err, fleet.ValuesTemplateFailedReason)
		}
		if re != nil && !strings.Contains(re.Message, "bundle web: helm.values.color") {
			t.Errorf("%q does not name the Bundle and the value", re.Message)
		}
	}
}

// TestPool_RunawayValuesTemplatesStopAtTheWorkersLimits: a values template
// that eats memory or loops is stopped by the worker's limits like a chart
// template, with the Bundle's reason, and costs the caller nothing.
func TestPool_RunawayValuesTemplatesStopAtTheWorkersLimits(t *testing.T) {
	const memory = 128 << 20
	cases := []struct {
		name, template string
		timeout        time.Duration
		reason         string
	}{
		{"until a huge number", `${ until 100000000 | len }`, time.Minute, fleet.RenderOutOfMemoryReason},
		{"nested ranges", `${ range until 3000 }${ range until 3000 }${ range until 3000 }${ end }${ end }${ end }`, 3 * time.Second, fleet.RenderTimeoutReason},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if raceDetector && tc.reason == fleet.RenderOutOfMemoryReason {
				t.Skip("the memory limit is not testable with the race detector (its shadow memory counts against RLIMIT_AS); runs in `make test`")
			}
			p := testPool(t, func(l *Limits) { l.Memory, l.Timeout = memory, tc.timeout })
			start := time.Now()
			_, err := p.RenderFor(t.Context(), "hungry", chartResources(configMapTemplate), valuesTemplateOptions(tc.template), &renderer.ClusterValues{Cluster: eu})
			took := time.Since(start)
			var re *RenderError
			if !errors.As(err, &re) || re.Reason != tc.reason {
				t.Fatalf("got %v, want reason %s", err, tc.reason)
			}
			t.Logf("%s after %s, worker peak RSS %s", re.Reason, took.Round(time.Millisecond), bundlefiles.FormatBytes(re.MaxRSS))
			if re.MaxRSS > memory+256<<20 {
				t.Errorf("worker peak RSS %s, want about the %s limit", bundlefiles.FormatBytes(re.MaxRSS), bundlefiles.FormatBytes(memory))
			}
			if tc.reason == fleet.RenderTimeoutReason && took > tc.timeout+10*time.Second {
				t.Errorf("stopped after %s; the limit is %s", took, tc.timeout)
			}
		})
	}
}
