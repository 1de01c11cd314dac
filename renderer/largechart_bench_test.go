package renderer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"runtime"
	"runtime/metrics"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/bundlecontent"
	"github.com/gitops-fleet/fleet/internal/bundlecontents"
	"github.com/gitops-fleet/fleet/internal/manifest"
	"github.com/gitops-fleet/fleet/renderer"
)

// The large chart: a kube-prometheus-stack-class chart generated here,
// about 20 MB of YAML once rendered: CustomResourceDefinitions with deep
// openAPIV3Schemas and their descriptions (crds/, as such charts ship
// them), Grafana dashboards in ConfigMaps (templates, so Helm renders
// them), and a few hundred small objects.
const (
	largeChartCRDs        = 36
	largeChartCRDBytes    = 400 << 10
	largeChartDashboards  = 110
	largeChartDashboardKB = 50
	largeChartSmall       = 300
)

var words = strings.Fields(`the a of to and in is for on that by this with it be as are from or an
	resource field value selector label annotation container pod service endpoint port target scrape
	interval timeout namespace secret key reference name object list spec status condition metric rule
	alert receiver route matcher relabel config storage volume claim retention replica shard tolerance
	affinity node weight priority image pull policy security context user group capability path header
	bearer token authorization tls certificate authority insecure skip verify server proxy url scheme
	honor labels timestamps limit sample body size keep drop replace hashmod regex source separator
	modulus action defaults when set must not be empty if specified otherwise only one more than zero
	deprecated use instead see documentation details kubernetes operator prometheus alertmanager thanos
	ruler query remote write read queue capacity shards backoff min max batch deadline exemplar native
	histogram protocol version compression encoding format duration seconds bytes percentage ratio`)

func sentence(r *rand.Rand, n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(words[r.IntN(len(words))])
	}
	b.WriteByte('.')
	return b.String()
}

// propSeq numbers property names, so no mapping repeats a key.
var propSeq int

func camel(r *rand.Rand) string {
	a, b := words[r.IntN(len(words))], words[r.IntN(len(words))]
	propSeq++
	return a + strings.ToUpper(b[:1]) + b[1:] + fmt.Sprint(propSeq)
}

// schemaProps writes properties at indent until the builder reaches budget.
func schemaProps(r *rand.Rand, b *strings.Builder, indent string, depth, budget int) {
	for n := 0; n < 3+r.IntN(6) && b.Len() < budget; n++ {
		fmt.Fprintf(b, "%s%s:\n%s  description: %q\n", indent, camel(r), indent, sentence(r, 8+r.IntN(30)))
		switch k := r.IntN(6); {
		case depth < 5 && k < 2:
			fmt.Fprintf(b, "%s  type: object\n%s  properties:\n", indent, indent)
			schemaProps(r, b, indent+"    ", depth+1, budget)
		case depth < 5 && k == 2:
			fmt.Fprintf(b, "%s  type: array\n%s  items:\n%s    type: object\n%s    properties:\n", indent, indent, indent, indent)
			schemaProps(r, b, indent+"      ", depth+1, budget)
		case k == 3:
			fmt.Fprintf(b, "%s  type: integer\n%s  format: int32\n%s  minimum: 0\n", indent, indent, indent)
		case k == 4:
			fmt.Fprintf(b, "%s  type: boolean\n", indent)
		default:
			fmt.Fprintf(b, "%s  type: string\n%s  pattern: ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$\n", indent, indent)
		}
	}
}

func largeCRD(r *rand.Rand, i int) string {
	kind := fmt.Sprintf("Monitor%d", i)
	plural := strings.ToLower(kind) + "s"
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  annotations:
    controller-gen.kubebuilder.io/version: v0.16.1
  name: %s.monitoring.example.com
spec:
  group: monitoring.example.com
  names:
    kind: %s
    listKind: %sList
    plural: %s
    singular: %s
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
    schema:
      openAPIV3Schema:
        description: %q
        type: object
        properties:
          apiVersion:
            type: string
          kind:
            type: string
          metadata:
            type: object
          spec:
            type: object
            properties:
`, plural, kind, kind, plural, strings.ToLower(kind), sentence(r, 40))
	for b.Len() < largeChartCRDBytes {
		schemaProps(r, &b, "              ", 0, largeChartCRDBytes)
	}
	return b.String()
}

func largeDashboard(r *rand.Rand, i int) string {
	var panels []map[string]any
	size := 0
	for size < largeChartDashboardKB<<10 {
		p := map[string]any{
			"id": len(panels) + 1, "type": "timeseries", "title": sentence(r, 4), "description": sentence(r, 20),
			"datasource": map[string]any{"type": "prometheus", "uid": "${datasource}"},
			"gridPos":    map[string]any{"h": 8, "w": 12, "x": 12 * (len(panels) % 2), "y": 8 * len(panels)},
			"fieldConfig": map[string]any{"defaults": map[string]any{"unit": "bytes", "min": 0,
				"thresholds": map[string]any{"mode": "absolute", "steps": []any{map[string]any{"color": "green", "value": nil}, map[string]any{"color": "red", "value": 80 + r.IntN(20)}}}}},
			"targets": []any{map[string]any{
				"expr":         fmt.Sprintf(`sum(rate(%s_%s_total{namespace="$namespace", pod=~"$pod", container!=""}[$__rate_interval])) by (%s)`, words[r.IntN(len(words))], words[r.IntN(len(words))], words[r.IntN(len(words))]),
				"legendFormat": "__auto", "refId": "A", "interval": fmt.Sprintf("%ds", 15+r.IntN(45)),
			}},
		}
		raw, _ := json.Marshal(p)
		size += len(raw) * 2 // indented
		panels = append(panels, p)
	}
	dash, _ := json.MarshalIndent(map[string]any{"title": fmt.Sprintf("Dashboard %d", i), "uid": fmt.Sprintf("dash-%d", i), "schemaVersion": 39, "panels": panels, "time": map[string]any{"from": "now-1h", "to": "now"}}, "", "  ")
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-dashboard-%d
  namespace: {{ .Release.Namespace }}
  labels:
    grafana_dashboard: "1"
    app.kubernetes.io/instance: {{ .Release.Name | quote }}
data:
  dashboard-%d.json: |-
`, i, i)
	for l := range strings.SplitSeq(string(dash), "\n") {
		b.WriteString("    " + l + "\n")
	}
	return b.String()
}

const largeSmallTemplate = `{{- range $i := until (int .Values.small) }}
---
apiVersion: v1
kind: Service
metadata:
  name: {{ $.Release.Name }}-exporter-{{ $i }}
  namespace: {{ $.Release.Namespace }}
  labels:
    app.kubernetes.io/name: exporter-{{ $i }}
    app.kubernetes.io/instance: {{ $.Release.Name }}
spec:
  selector:
    app.kubernetes.io/name: exporter-{{ $i }}
  ports:
  - name: metrics
    port: {{ add 9100 $i }}
    targetPort: metrics
{{- end }}
`

var (
	largeChartOnce  sync.Once
	largeChartFiles map[string][]byte
)

// largeChart returns the chart's files as a Bundle's resources decode to.
func largeChart() map[string][]byte {
	largeChartOnce.Do(func() {
		r := rand.New(rand.NewPCG(29, 3))
		files := map[string][]byte{
			"chart/Chart.yaml":           []byte("apiVersion: v2\nname: monitoring-stack\nversion: 65.1.0\n"),
			"chart/values.yaml":          []byte("small: 300\n"),
			"chart/templates/small.yaml": []byte(largeSmallTemplate),
		}
		for i := range largeChartCRDs {
			files[fmt.Sprintf("chart/crds/crd-%02d.yaml", i)] = []byte(largeCRD(r, i))
		}
		for i := range largeChartDashboards {
			files[fmt.Sprintf("chart/templates/dashboards/dashboard-%03d.yaml", i)] = []byte(largeDashboard(r, i))
		}
		largeChartFiles = files
	})
	return largeChartFiles
}

var largeChartOptions = fleet.BundleDeploymentOptions{DefaultNamespace: "monitoring", Helm: &fleet.HelmOptions{Chart: "chart"}}

// peakHeap runs f and returns the most heap its objects took meanwhile,
// above what they took before, sampled every millisecond.
func peakHeap(f func()) (peak uint64) {
	runtime.GC()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() uint64 { metrics.Read(sample); return sample[0].Value.Uint64() }
	base := read()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			if v := read(); v > peak {
				peak = v
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	})
	f()
	close(done)
	wg.Wait()
	if v := read(); v > peak {
		peak = v
	}
	if peak < base {
		return 0
	}
	return peak - base
}

const mib = 1 << 20

// BenchmarkLargeChart measures the 20 MB chart on its way to a cluster:
// render (a render worker's work: Helm, phases, the JSON answer), the
// controller's encoding into what it writes upstream per cluster (gzip,
// chunks), and the agent's read (chunks checked, gunzipped, decoded into
// objects). Each reports its peak heap; encode reports the bytes and
// objects written upstream per cluster.
func BenchmarkLargeChart(b *testing.B) {
	files := largeChart()
	input := 0
	for _, f := range files {
		input += len(f)
	}
	out, err := renderer.RenderFiles("monitoring", files, largeChartOptions)
	if err != nil {
		b.Fatal(err)
	}
	manifests := out.YAML
	if len(manifests) < 18*mib {
		b.Fatalf("the chart renders to %d bytes, not a 20 MB chart", len(manifests))
	}

	b.Run("render", func(b *testing.B) {
		var peak uint64
		for b.Loop() {
			peak = max(peak, peakHeap(func() {
				out, err := renderer.RenderFiles("monitoring", files, largeChartOptions)
				if err != nil {
					b.Fatal(err)
				}
				// The worker's answer to the controller.
				if _, err := json.Marshal(struct{ YAML []byte }{out.YAML}); err != nil {
					b.Fatal(err)
				}
			}))
		}
		b.ReportMetric(float64(input)/mib, "MiB-chart")
		b.ReportMetric(float64(len(manifests))/mib, "MiB-manifests")
		b.ReportMetric(float64(peak)/mib, "MiB-peak-heap")
	})

	var enc *bundlecontent.Encoded
	b.Run("encode", func(b *testing.B) {
		var peak uint64
		for b.Loop() {
			peak = max(peak, peakHeap(func() {
				if enc, err = bundlecontent.EncodeContent("monitoring", manifests); err != nil {
					b.Fatal(err)
				}
			}))
		}
		upstream := 0
		for _, v := range enc.Data {
			upstream += len(v)
		}
		for _, c := range enc.Chunks {
			upstream += len(c.Data)
		}
		b.ReportMetric(float64(upstream)/mib, "MiB-upstream/cluster")
		// The BundleDeployment, the content Secret, the chunks.
		b.ReportMetric(float64(2+len(enc.Chunks)), "objects/cluster")
		b.ReportMetric(float64(len(manifests))/float64(enc.Size), "ratio")
		b.ReportMetric(float64(peak)/mib, "MiB-peak-heap")
	})
	if enc == nil {
		return
	}

	// The cluster namespace as the agent reads it.
	secrets := map[string]*corev1.Secret{"monitoring": {ObjectMeta: metav1.ObjectMeta{Namespace: "cluster-x", Name: "monitoring"}, Type: bundlecontent.SecretType, Data: enc.Data}}
	for _, c := range enc.Chunks {
		secrets[c.Name] = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "cluster-x", Name: c.Name}, Type: bundlecontent.ChunkSecretType, Data: map[string][]byte{bundlecontent.KeyChunk: c.Data}}
	}
	get := func(_ context.Context, name string) (*corev1.Secret, error) {
		if s, ok := secrets[name]; ok {
			return s, nil
		}
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, name)
	}
	b.Run("agent-read", func(b *testing.B) {
		var peak uint64
		objects := 0
		for b.Loop() {
			peak = max(peak, peakHeap(func() {
				m, err := bundlecontent.Read(b.Context(), secrets["monitoring"], "monitoring", enc.ManifestID, get)
				if err != nil {
					b.Fatal(err)
				}
				sections, err := bundlecontent.SplitPhases(m)
				if err != nil {
					b.Fatal(err)
				}
				objects = 0
				var keep [][]any
				for _, s := range sections {
					objs, err := manifest.Decode(s.YAML)
					if err != nil {
						b.Fatal(err)
					}
					objects += len(objs)
					keep = append(keep, []any{objs})
				}
				runtime.KeepAlive(keep)
			}))
		}
		b.ReportMetric(float64(objects), "objects-applied")
		b.ReportMetric(float64(peak)/mib, "MiB-peak-heap")
	})
}

// BenchmarkBundleContents measures the upstream half of large content: the
// 20 MB chart as a Bundle's resources (as fleet apply writes them, plain
// text), split by its writer into contents Secrets (gzip, chunks: the bytes
// and objects written to the Bundle's namespace), and read back by the
// controller (chunks checked, gunzipped, decoded into resources).
func BenchmarkBundleContents(b *testing.B) {
	files := largeChart()
	bundle := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet-default", Name: "monitoring"}}
	bundle.Spec.BundleDeploymentOptions = largeChartOptions
	for name, data := range files {
		bundle.Spec.Resources = append(bundle.Spec.Resources, fleet.BundleResource{Name: name, Content: string(data)})
	}
	sort.Slice(bundle.Spec.Resources, func(i, j int) bool { return bundle.Spec.Resources[i].Name < bundle.Spec.Resources[j].Name })
	_, js, err := bundlecontent.ContentsID(bundle.Spec.Resources)
	if err != nil {
		b.Fatal(err)
	}

	var split *fleet.Bundle
	var secrets []*corev1.Secret
	b.Run("write", func(b *testing.B) {
		var peak uint64
		for b.Loop() {
			peak = max(peak, peakHeap(func() {
				if split, secrets, err = bundlecontents.Split(bundle, 0); err != nil {
					b.Fatal(err)
				}
			}))
		}
		written := 0
		for _, s := range secrets {
			for _, v := range s.Data {
				written += len(v)
			}
		}
		b.ReportMetric(float64(len(js))/mib, "MiB-resources-json")
		b.ReportMetric(float64(written)/mib, "MiB-written")
		// The contents Secrets and the Bundle.
		b.ReportMetric(float64(1+len(secrets)), "objects")
		b.ReportMetric(float64(peak)/mib, "MiB-peak-heap")
	})
	if split == nil {
		return
	}
	byName := map[string]*corev1.Secret{}
	for _, s := range secrets {
		byName[s.Name] = s
	}
	get := func(_ context.Context, name string) (*corev1.Secret, error) {
		if s, ok := byName[name]; ok {
			return s, nil
		}
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, name)
	}
	b.Run("controller-read", func(b *testing.B) {
		var peak uint64
		n := 0
		for b.Loop() {
			peak = max(peak, peakHeap(func() {
				res, err := bundlecontent.ReadContents(b.Context(), split.Namespace, split.Name, split.Spec.ContentsID, get)
				if err != nil {
					b.Fatal(err)
				}
				n = len(res)
			}))
		}
		b.ReportMetric(float64(n), "resources")
		b.ReportMetric(float64(peak)/mib, "MiB-peak-heap")
	})
}
