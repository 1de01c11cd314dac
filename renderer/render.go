package renderer

import (
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	release "helm.sh/helm/v4/pkg/release/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gitops-fleet/fleet/internal/manifest"
	"github.com/gitops-fleet/fleet/renderer/kustomize"
)

// Input is what to render.
type Input struct {
	// Chart is the parsed chart.
	Chart *Chart
	// ReleaseName and Namespace are the Helm release's.
	ReleaseName string
	Namespace   string
	// Values is a Helm values file (YAML). It is read exactly as `helm
	// template -f` reads it, so rendering here and with the helm CLI agree.
	Values []byte
	// Overlay is an optional kustomize overlay: file path → content, with a
	// kustomization.yaml at the root. The chart's output is added to the
	// overlay's resources, so the overlay only holds patches and
	// transformers.
	Overlay map[string][]byte
	// IncludeCRDs renders the chart's crds/ too, first (`helm template
	// --include-crds`): a Bundle's chart installs its CRDs as Helm does.
	IncludeCRDs bool
	// SkipSchemaValidation renders without checking the values against
	// the charts' values.schema.json (helm.skipSchemaValidation).
	SkipSchemaValidation bool
}

// Output is the rendered result.
type Output struct {
	// YAML is the multi-document YAML: without an overlay, byte for byte what
	// `helm template` prints for the same chart, release, namespace and values.
	YAML []byte

	once    sync.Once
	objects []*unstructured.Unstructured
	err     error
}

// Objects returns the documents of YAML as objects, in the same order. They
// are decoded on first use: storing a render (a Bundle, a review) needs only
// the YAML. Callers must not modify the returned objects.
func (o *Output) Objects() ([]*unstructured.Unstructured, error) {
	o.once.Do(func() { o.objects, o.err = DecodeObjects(o.YAML) })
	return o.objects, o.err
}

// Render renders a chart, then the overlay if there is one.
func Render(in Input) (*Output, error) {
	if in.Chart == nil {
		return nil, errors.New("no chart to render")
	}
	manifest, err := renderChart(in)
	if err != nil {
		return nil, err
	}
	out := []byte(manifest)
	if len(in.Overlay) > 0 {
		if out, err = kustomize.BuildOverlay(in.Overlay, out); err != nil {
			return nil, err
		}
	}
	return &Output{YAML: out}, nil
}

// KubeVersion is the Kubernetes version charts see as
// .Capabilities.KubeVersion (and Chart.yaml kubeVersion constraints are
// checked against) when the renderer renders them. It is pinned, not taken
// from the cluster: the same chart and values render the same bytes for
// every cluster and in every build. Helm 4's own default comes from the
// client-go it is built with (v1.37.0 for Helm v4.3.2, but v1.20.0 inside
// `go test` binaries), so it is pinned here to what a Helm v4.3.2 CLI says;
// `helm template --kube-version v1.37.0` gives the same bytes with any Helm
// 3 or 4 CLI.
const KubeVersion = "v1.37.0"

// kubeVersion is KubeVersion parsed once.
var kubeVersion = func() *common.KubeVersion {
	v, err := common.ParseKubeVersion(KubeVersion)
	if err != nil {
		panic(fmt.Sprintf("renderer.KubeVersion %q: %v", KubeVersion, err))
	}
	return v
}()

// renderChart is `helm template` through the Helm SDK: the same install
// action in client-only dry-run mode, the same values parsing and the same
// output assembly (manifest, then hooks).
func renderChart(in Input) (string, error) {
	vals, err := common.ReadValues(in.Values)
	if err != nil {
		return "", fmt.Errorf("values are not valid YAML: %w", err)
	}
	// Helm's debug lines go nowhere: every failure comes back as an error.
	install := action.NewInstall(action.NewConfiguration(action.ConfigurationSetLogger(slog.DiscardHandler)))
	install.DryRunStrategy = action.DryRunClient
	install.Replace = true
	install.ReleaseName = in.ReleaseName
	install.Namespace = in.Namespace
	install.DisableOpenAPIValidation = true
	install.KubeVersion = kubeVersion
	install.IncludeCRDs = in.IncludeCRDs

	in.Chart.mu.Lock()
	defer in.Chart.mu.Unlock()
	if in.SkipSchemaValidation {
		install.SkipSchemaValidation = true
	} else if in.Chart.schema != nil {
		coalesced, err := chartutil.CoalesceValues(in.Chart.chart, vals)
		if err != nil {
			return "", fmt.Errorf("rendering chart %s: %w", in.Chart.Name(), err)
		}
		if err := in.Chart.validate(coalesced.AsMap()); err != nil {
			return "", fmt.Errorf("rendering chart %s: %w", in.Chart.Name(), err)
		}
		install.SkipSchemaValidation = true
	}
	r, err := install.Run(in.Chart.chart, vals)
	if err != nil {
		return "", fmt.Errorf("rendering chart %s: %w", in.Chart.Name(), cleanHelmError(err))
	}
	rel, ok := r.(*release.Release)
	if !ok {
		return "", fmt.Errorf("rendering chart %s: Helm returned a %T release, not a v1 release", in.Chart.Name(), r)
	}
	var b strings.Builder
	b.WriteString(strings.TrimSpace(rel.Manifest))
	b.WriteString("\n")
	for _, h := range rel.Hooks {
		fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", h.Path, h.Manifest)
	}
	return b.String(), nil
}

// cleanHelmError keeps the part of a Helm error a person acts on: for a
// `fail` in a template, the message itself.
func cleanHelmError(err error) error {
	msg := err.Error()
	if i := strings.LastIndex(msg, "error calling fail: "); i >= 0 {
		return errors.New(msg[i+len("error calling fail: "):])
	}
	return err
}

// DecodeObjects splits multi-document YAML into objects, in order, skipping
// empty documents. Numbers keep their integer type. It is manifest.Decode,
// which the agent uses without linking Helm or kustomize.
func DecodeObjects(manifests []byte) ([]*unstructured.Unstructured, error) {
	return manifest.Decode(manifests)
}

// SortObjects orders objects the way they must be applied: namespaces and
// CRDs first, then by kind, namespace and name. Used where the input order is
// not already meaningful (raw manifests).
func SortObjects(objs []*unstructured.Unstructured) {
	rank := func(o *unstructured.Unstructured) int {
		switch o.GetKind() {
		case "CustomResourceDefinition":
			return 0
		case "Namespace":
			return 1
		}
		return 2
	}
	sort.SliceStable(objs, func(i, j int) bool {
		a, b := objs[i], objs[j]
		if ra, rb := rank(a), rank(b); ra != rb {
			return ra < rb
		}
		if a.GetKind() != b.GetKind() {
			return a.GetKind() < b.GetKind()
		}
		if a.GetNamespace() != b.GetNamespace() {
			return a.GetNamespace() < b.GetNamespace()
		}
		return a.GetName() < b.GetName()
	})
}
