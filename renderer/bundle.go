package renderer

import (
	"bytes"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"

	"helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	"sigs.k8s.io/yaml"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/bundleoptions"
	"github.com/gitops-fleet/fleet/internal/chartpath"
	"github.com/gitops-fleet/fleet/internal/targeting"
	"github.com/gitops-fleet/fleet/renderer/bundlefiles"
	"github.com/gitops-fleet/fleet/renderer/kustomize"
)

// MergeOptions lays a target's options over the Bundle's: set fields win,
// Helm values are merged key by key.
func MergeOptions(base, over fleet.BundleDeploymentOptions) fleet.BundleDeploymentOptions {
	out := *base.DeepCopy()
	if over.DefaultNamespace != "" {
		out.DefaultNamespace = over.DefaultNamespace
	}
	if over.TargetNamespace != "" {
		out.TargetNamespace = over.TargetNamespace
	}
	if over.Kustomize != nil && over.Kustomize.Dir != "" {
		out.Kustomize = over.Kustomize.DeepCopy()
	}
	if over.CorrectDrift != nil {
		out.CorrectDrift = over.CorrectDrift.DeepCopy()
	}
	if over.KeepResources {
		out.KeepResources = true
	}
	if over.ForceSyncGeneration != 0 {
		out.ForceSyncGeneration = over.ForceSyncGeneration
	}
	if over.ServiceAccount != "" {
		out.ServiceAccount = over.ServiceAccount
	}
	for k, v := range over.NamespaceLabels {
		if out.NamespaceLabels == nil {
			out.NamespaceLabels = map[string]string{}
		}
		out.NamespaceLabels[k] = v
	}
	for k, v := range over.NamespaceAnnotations {
		if out.NamespaceAnnotations == nil {
			out.NamespaceAnnotations = map[string]string{}
		}
		out.NamespaceAnnotations[k] = v
	}
	if h := over.Helm; h != nil {
		if out.Helm == nil {
			out.Helm = &fleet.HelmOptions{}
		}
		if h.Chart != "" {
			out.Helm.Chart = h.Chart
		}
		if h.ReleaseName != "" {
			out.Helm.ReleaseName = h.ReleaseName
		}
		out.Helm.ValuesFiles = append(out.Helm.ValuesFiles, h.ValuesFiles...)
		if h.Values != nil {
			merged := map[string]any{}
			if out.Helm.Values != nil {
				merged = out.Helm.Values.Data
			}
			out.Helm.Values = &fleet.GenericMap{Data: chartutil.MergeTables(h.Values.DeepCopy().Data, merged)}
		}
		out.Helm.TakeOwnership = out.Helm.TakeOwnership || h.TakeOwnership
		if h.TimeoutSeconds != 0 {
			out.Helm.TimeoutSeconds = h.TimeoutSeconds
		}
	}
	mergeMoreOptions(&out, over)
	return out
}

// RenderBundle renders, in this process, what the controller deploys of a
// Bundle to one cluster: the Helm chart if there is one, then the kustomize
// overlay if there is one; otherwise every YAML file of the Bundle, in path
// order. A nil cluster renders the Bundle's own options (no target
// customisation). groups are the ClusterGroups the caller has (targeting
// treats them as given, not as the whole workspace: a target needing
// another one is a *targeting.MissingGroupsError); a cluster the Bundle
// deploys nothing to is a *NotDeployedError. Bundles from untrusted authors
// render in a render worker (internal/renderworker) instead.
func RenderBundle(bundle *fleet.Bundle, cluster *fleet.Cluster, groups []fleet.ClusterGroup) (*Output, error) {
	return RenderBundleWith(bundle, cluster, groups, nil)
}

// RenderBundleWith is RenderBundle with the content of the Bundle's
// helm.valuesFrom references (ValuesFromRefs of the options for cluster), as
// read from the upstream. A cluster's `${ }` values are templated with its
// whole context (ContextOf), which renders what the controller's partial
// context renders.
func RenderBundleWith(bundle *fleet.Bundle, cluster *fleet.Cluster, groups []fleet.ClusterGroup, valuesFrom []ValuesSource) (*Output, error) {
	if err := bundleoptions.Check(&bundle.Spec); err != nil {
		return nil, err
	}
	files, err := bundlefiles.Decode(bundle.Spec.Resources)
	if err != nil {
		return nil, err
	}
	opts := bundle.Spec.BundleDeploymentOptions
	values := ClusterValues{ValuesFrom: valuesFrom}
	if cluster != nil {
		values.Cluster = ContextOf(cluster)
		o, t, err := OptionsFor(bundle, cluster, targeting.Groups{Items: groups, Given: true})
		if err != nil {
			return nil, err
		}
		if t == nil || t.DoNotDeploy {
			return nil, &NotDeployedError{Message: targeting.Describe(bundle, cluster, t)}
		}
		opts = o
	}
	opts, err = ResolveValues(opts, values)
	if err != nil {
		return nil, fmt.Errorf("bundle %s: %w", bundle.Name, err)
	}
	return RenderFiles(bundle.Name, files, opts)
}

// ReasonOf returns the Bundle condition reason an error from rendering
// reports as: the error's own reason if it has one, else RenderFailed.
func ReasonOf(err error) string {
	var r interface{ Reason() string }
	if errors.As(err, &r) {
		return r.Reason()
	}
	return fleet.RenderFailedReason
}

// NotDeployedError: the Bundle deploys nothing to the cluster.
type NotDeployedError struct{ Message string }

func (e *NotDeployedError) Error() string { return e.Message }

// OptionsFor returns what a Bundle deploys to a cluster: the target that
// decides (targeting.Match; nil when none selects it) and, unless there is
// none or it has doNotDeploy, the Bundle's options with the options of the
// targets the cluster takes (targeting.MatchAll: the first, or with
// AllMatches every selecting one in order) laid over them. The controller
// and `fleet render bundle` both decide with it.
func OptionsFor(bundle *fleet.Bundle, cluster *fleet.Cluster, groups targeting.Groups) (fleet.BundleDeploymentOptions, *fleet.BundleTarget, error) {
	t, err := targeting.Match(bundle, cluster, groups)
	if err != nil || t == nil || t.DoNotDeploy {
		return fleet.BundleDeploymentOptions{}, t, err
	}
	all, err := targeting.MatchAll(bundle, cluster, groups)
	if err != nil {
		return fleet.BundleDeploymentOptions{}, nil, err
	}
	opts := bundle.Spec.BundleDeploymentOptions
	for _, m := range all {
		opts = MergeOptions(opts, m.BundleDeploymentOptions)
	}
	return opts, t, nil
}

// RenderFiles renders a Bundle's decoded files with its options.
func RenderFiles(name string, files map[string][]byte, opts fleet.BundleDeploymentOptions) (*Output, error) {
	files, opts = fleetLayout(files, opts)
	var manifests []byte
	switch {
	case opts.Helm != nil && (opts.Helm.Chart != "" || chartpath.Remote(opts.Helm)):
		chartDir, err := chartDirOf(files, opts.Helm)
		if err != nil {
			return nil, err
		}
		ch, err := loadChartFiles(files, chartDir)
		if err != nil {
			return nil, err
		}
		values, err := bundleValues(files, opts.Helm)
		if err != nil {
			return nil, err
		}
		release := opts.Helm.ReleaseName
		if release == "" {
			release = name
		}
		ns := opts.TargetNamespace
		if ns == "" {
			ns = opts.DefaultNamespace
		}
		if ns == "" {
			ns = "default"
		}
		out, err := Render(Input{Chart: ch, ReleaseName: release, Namespace: ns, Values: values, IncludeCRDs: true, SkipSchemaValidation: opts.Helm.SkipSchemaValidation})
		if err != nil {
			return nil, err
		}
		manifests = out.YAML
	case opts.Kustomize != nil && opts.Kustomize.Dir != "":
		// A kustomization without a chart builds from its own files only.
	default:
		files, err := applyYAMLOverlays(files, yamlOverlays(opts))
		if err != nil {
			return nil, err
		}
		var paths []string
		for p := range files {
			if ext := path.Ext(p); ext == ".yaml" || ext == ".yml" || ext == ".json" {
				paths = append(paths, p)
			}
		}
		sort.Strings(paths)
		var b bytes.Buffer
		for _, p := range paths {
			fmt.Fprintf(&b, "---\n# Source: %s\n", p)
			b.Write(bytes.TrimSpace(files[p]))
			b.WriteString("\n")
		}
		manifests = b.Bytes()
	}
	if opts.Kustomize != nil && opts.Kustomize.Dir != "" {
		dir := path.Clean(opts.Kustomize.Dir)
		found := false
		for p := range files {
			if dir == "." || strings.HasPrefix(p, dir+"/") {
				found = true
				break
			}
		}
		if !found {
			return nil, fmt.Errorf("kustomize.dir %q: the Bundle has no files there", opts.Kustomize.Dir)
		}
		// The whole Bundle is the kustomization's filesystem: its bases
		// (../base) are files of the Bundle too.
		out, err := kustomize.Build(files, dir, manifests)
		if err != nil {
			return nil, err
		}
		manifests = out
	}
	manifests, err := orderPhases(manifests)
	if err != nil {
		return nil, err
	}
	out := &Output{YAML: manifests}
	// Raw manifests are the user's own YAML: report a broken file now.
	if _, err := out.Objects(); err != nil {
		return nil, err
	}
	return out, nil
}

// bundleValues merges the values files, then the inline values, into one
// values document.
func bundleValues(files map[string][]byte, h *fleet.HelmOptions) ([]byte, error) {
	merged := map[string]any{}
	for _, vf := range h.ValuesFiles {
		data, ok := files[path.Clean(vf)]
		if !ok {
			return nil, fmt.Errorf("helm.valuesFiles: %q is not in the Bundle", vf)
		}
		v, err := common.ReadValues(data)
		if err != nil {
			return nil, fmt.Errorf("helm.valuesFiles: %s: %w", vf, err)
		}
		merged = chartutil.MergeTables(v, merged)
	}
	if h.Values != nil && h.Values.Data != nil {
		merged = chartutil.MergeTables(h.Values.DeepCopy().Data, merged)
	}
	if len(merged) == 0 {
		return nil, nil
	}
	out, err := yaml.Marshal(merged)
	if err != nil {
		return nil, errors.New("helm values cannot be serialised")
	}
	return out, nil
}
