package review

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/fluxcd/pkg/ssa"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/apply"
	"github.com/gitops-fleet/fleet/internal/bundlecontent"
	"github.com/gitops-fleet/fleet/internal/comparepatch"
	"github.com/gitops-fleet/fleet/internal/manifest"
	"github.com/gitops-fleet/fleet/internal/names"
	"github.com/gitops-fleet/fleet/internal/scheme"
)

// BundleRender renders Bundle b for Cluster c as the controller does: the
// content the agent receives (phases included) and the options in force
// for that cluster (the Bundle's, with its matching target's laid over).
type BundleRender func(ctx context.Context, b *fleet.Bundle, c *fleet.Cluster) (content []byte, opts fleet.BundleDeploymentOptions, err error)

// BundleLive is what one Bundle's objects, as the head side renders them,
// would change on one cluster.
type BundleLive struct {
	Bundle string `json:"bundle"`
	// Lines: one per object that would change ("ConfigMap ns/a: configured
	// (changed data.b)"), objects that differ only in what the Bundle's
	// diff.comparePatches leave out (said so, not a change), or "nothing
	// changes on the cluster".
	Lines []string `json:"lines,omitempty"`
	// Error says why the cluster could not be asked (the review goes on).
	Error string `json:"error,omitempty"`
}

// NothingChanges is the line of a Bundle deployed exactly as rendered.
const NothingChanges = "nothing changes on the cluster"

// liveBundles lists the head Bundles that the change deploys anew to the
// cluster: those that start deploying to it, change target, or change at
// all, and every one of them when the Cluster itself changes (its labels
// and templateValues are the Bundles' values). Bundles the change does not
// touch are not asked about.
func liveBundles(base, head *Tree, b, h *side, clusterChanged bool) []*fleet.Bundle {
	var out []*fleet.Bundle
	ws := h.cluster.Namespace
	for _, name := range h.bundles {
		hb := head.Bundles[ws+"/"+name]
		bb, ok := base.Bundles[ws+"/"+name]
		if clusterChanged || b == nil || !ok || b.targets[name] != h.targets[name] || !slices.Contains(b.bundles, name) ||
			!equality.Semantic.DeepEqual(bb.Spec, hb.Spec) || !equality.Semantic.DeepEqual(bb.Labels, hb.Labels) {
			out = append(out, hb)
		}
	}
	return out
}

// LiveBundles asks each cluster, for every Bundle the change deploys anew
// there, what its objects would really change: a server-side dry run of
// each object as the agent applies it (field manager fleet, the
// BundleDeployment's owner labels, the same namespaces), as the reviewer,
// compared as the agent's drift check compares (comparepatch.Drift): what
// the Bundle's diff.comparePatches leave out is not a change, and is named
// as left out. Helm hooks are not asked about (they are not release
// objects, the agent never compares them). New and removed Clusters are
// skipped (no agent to reach yet, or it goes).
func (r *Report) LiveBundles(ctx context.Context, configFor ClusterConfig, render BundleRender) {
	for i := range r.Clusters {
		c := &r.Clusters[i]
		if c.Change == Added || c.Change == Removed || len(c.liveBundles) == 0 {
			continue
		}
		ws, name, _ := strings.Cut(c.Key, "/")
		cl, clientErr := liveClient(configFor, ws, name)
		for _, b := range c.liveBundles {
			bl := BundleLive{Bundle: b.Name}
			if clientErr != nil {
				bl.Error = clientErr.Error()
			} else if lines, err := dryRunBundle(ctx, cl, render, b, c.cluster, names.ClusterNamespace(ws, name)); err != nil {
				bl.Error = err.Error()
			} else {
				bl.Lines = lines
			}
			c.BundlesLive = append(c.BundlesLive, bl)
		}
	}
}

func liveClient(configFor ClusterConfig, ws, name string) (client.Client, error) {
	cfg, err := configFor(ws, name)
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		return nil, fmt.Errorf("a client for the cluster: %w", err)
	}
	return c, nil
}

func dryRunBundle(ctx context.Context, c client.Client, render BundleRender, b *fleet.Bundle, cluster *fleet.Cluster, clusterNS string) ([]string, error) {
	content, opts, err := render(ctx, b, cluster)
	if err != nil {
		return nil, err
	}
	rules, err := comparepatch.New(opts.Diff)
	if err != nil {
		return nil, err
	}
	objs, err := releaseObjects(content)
	if err != nil {
		return nil, err
	}
	for _, o := range objs {
		if err := setNamespace(c, o, opts); err != nil {
			return nil, err
		}
	}
	m := apply.NewManager(c)
	m.SetOwnerLabels(objs, b.Name, clusterNS)
	var out []string
	for _, o := range objs {
		what := o.GetKind() + " " + objectName(o)
		entry, live, merged, err := m.Diff(ctx, o.DeepCopy(), ssa.DefaultDiffOptions())
		switch {
		case err != nil && (apierrors.IsNotFound(err) || meta.IsNoMatchError(err)):
			// Its namespace or its CRD is not there (yet).
			out = append(out, missingLine(rules, o, what))
		case err != nil:
			return out, fmt.Errorf("dry run of %s: %w", what, err)
		case entry.Action == ssa.CreatedAction:
			out = append(out, missingLine(rules, o, what))
		case entry.Action == ssa.ConfiguredAction:
			if live == nil || merged == nil {
				out = append(out, what+": configured")
				continue
			}
			summary, drifted, err := comparepatch.Drift(rules, live, merged)
			switch {
			case err != nil:
				return out, fmt.Errorf("%s: %w", what, err)
			case !drifted:
				out = append(out, what+": unchanged; it differs only in what diff.comparePatches leave out")
			case summary == "":
				out = append(out, what+": configured")
			default:
				out = append(out, what+": configured ("+summary+")")
			}
		}
	}
	if len(out) == 0 {
		out = []string{NothingChanges}
	}
	return out, nil
}

func missingLine(rules *comparepatch.Rules, o *unstructured.Unstructured, what string) string {
	if rules.IgnoresMissing(o) {
		return what + ": missing; not a change: diff.comparePatches ignore it"
	}
	return what + ": created"
}

// releaseObjects are the objects of the content the agent applies and
// compares: the CRDs and the main objects, not the hooks.
func releaseObjects(content []byte) ([]*unstructured.Unstructured, error) {
	sections, err := bundlecontent.SplitPhases(content)
	if err != nil {
		return nil, err
	}
	var objs []*unstructured.Unstructured
	for _, s := range sections {
		if s.Phase != bundlecontent.PhaseCRDs && s.Phase != bundlecontent.PhaseMain {
			continue
		}
		decoded, err := manifest.Decode(s.YAML)
		if err != nil {
			return nil, fmt.Errorf("phase %s: %w", s.Phase, err)
		}
		objs = append(objs, decoded...)
	}
	return objs, nil
}

// setNamespace puts o where the agent puts it (agent/deployer
// prepareObjects): cluster-scoped objects in none, namespaced ones in
// namespace (targetNamespace), else their own, else defaultNamespace, else
// "default". A kind the cluster does not serve keeps its own.
func setNamespace(c client.Client, o *unstructured.Unstructured, opts fleet.BundleDeploymentOptions) error {
	namespaced, err := c.IsObjectNamespaced(o)
	if meta.IsNoMatchError(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("looking up kind %s: %w", o.GroupVersionKind(), err)
	}
	switch {
	case !namespaced:
		o.SetNamespace("")
	case opts.TargetNamespace != "":
		o.SetNamespace(opts.TargetNamespace)
	case o.GetNamespace() == "" && opts.DefaultNamespace != "":
		o.SetNamespace(opts.DefaultNamespace)
	case o.GetNamespace() == "":
		o.SetNamespace("default")
	}
	return nil
}
