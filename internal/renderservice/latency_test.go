package renderservice_test

import (
	"context"
	"io/fs"
	"os"
	"slices"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/charts"
	"github.com/gitops-fleet/fleet/dev/renderenv"
	"github.com/gitops-fleet/fleet/internal/renderworker"
	"github.com/gitops-fleet/fleet/renderer"
)

// latencyBundle is a Bundle to render in the latency benchmark.
type latencyBundle struct {
	name      string
	resources []fleet.BundleResource
	opts      fleet.BundleDeploymentOptions
}

// exampleBundle is examples/gitops/bundles/hello.yaml: a small chart and a
// kustomize overlay.
func exampleBundle(t testing.TB) latencyBundle {
	t.Helper()
	raw, err := os.ReadFile("../../examples/gitops/bundles/hello.yaml")
	if err != nil {
		t.Fatal(err)
	}
	b := &fleet.Bundle{}
	if err := yaml.UnmarshalStrict(raw, b); err != nil {
		t.Fatal(err)
	}
	return latencyBundle{name: "example", resources: b.Spec.Resources, opts: b.Spec.BundleDeploymentOptions}
}

// agentChartBundle is charts/fleet-agent as a Bundle: a real chart of a
// dozen templates with a values schema.
func agentChartBundle(t testing.TB) latencyBundle {
	t.Helper()
	var res []fleet.BundleResource
	err := fs.WalkDir(charts.FleetAgent(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(charts.FleetAgent(), path)
		res = append(res, fleet.BundleResource{Name: "fleet-agent/" + path, Content: string(b)})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return latencyBundle{name: "chart", resources: res, opts: fleet.BundleDeploymentOptions{
		DefaultNamespace: "cattle-fleet-system",
		Helm: &fleet.HelmOptions{Chart: "fleet-agent", ReleaseName: "fleet-agent", Values: &fleet.GenericMap{Data: map[string]any{
			"apiServerURL": "https://upstream.example.com:6443", "bootstrap": map[string]any{"enabled": false},
		}}},
	}}
}

func percentile(sorted []time.Duration, p float64) float64 {
	i := min(len(sorted)-1, int(p*float64(len(sorted))))
	return float64(sorted[i].Microseconds()) / 1000
}

type renderFunc func(context.Context, string, []fleet.BundleResource, fleet.BundleDeploymentOptions) (*renderer.Output, error)

// BenchmarkRenderLatency renders the example Bundle and a chart Bundle in
// turn through an in-pod worker (renderworker.Pool, as with
// renderer.enabled false) and through the renderer process on loopback
// (TLS, bearer token, the renderer's own worker), alternating so that the
// machine's load weighs on both alike, and reports the p50 and p95 of each
// and the p50 of the paired difference: the latency the renderer adds to a
// render.
//
//	go test -run '^$' -bench RenderLatency -benchtime 200x ./internal/renderservice/
func BenchmarkRenderLatency(b *testing.B) {
	r, creds := startRenderer(b, renderenv.Options{})
	pool, err := renderworker.NewPool(defaultLimits)
	if err != nil {
		b.Fatal(err)
	}
	remote := newClient(b, r.URL, creds, nil)
	for _, bundle := range []latencyBundle{exampleBundle(b), agentChartBundle(b)} {
		b.Run(bundle.name, func(b *testing.B) {
			var inPod, viaRenderer, added []time.Duration
			measure := func(render renderFunc) time.Duration {
				start := time.Now()
				out, err := render(b.Context(), "hello", bundle.resources, bundle.opts)
				if err != nil {
					b.Fatal(err)
				}
				if len(out.YAML) == 0 {
					b.Fatal("rendered nothing")
				}
				return time.Since(start)
			}
			// One of each first: the renderer's first TLS handshake and
			// both sides' page cache are not what a render costs.
			measure(pool.Render)
			measure(remote.Render)
			for b.Loop() {
				p, v := measure(pool.Render), measure(remote.Render)
				inPod, viaRenderer, added = append(inPod, p), append(viaRenderer, v), append(added, v-p)
			}
			for _, s := range [][]time.Duration{inPod, viaRenderer, added} {
				slices.Sort(s)
			}
			b.ReportMetric(percentile(inPod, 0.5), "in-pod-p50-ms")
			b.ReportMetric(percentile(inPod, 0.95), "in-pod-p95-ms")
			b.ReportMetric(percentile(viaRenderer, 0.5), "renderer-p50-ms")
			b.ReportMetric(percentile(viaRenderer, 0.95), "renderer-p95-ms")
			b.ReportMetric(percentile(added, 0.5), "added-p50-ms")
		})
	}
}
