package review

import (
	"context"
	"fmt"
	"strings"

	"github.com/fluxcd/pkg/ssa"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gitops-fleet/fleet/internal/apply"
	"github.com/gitops-fleet/fleet/internal/names"
	"github.com/gitops-fleet/fleet/internal/scheme"
)

// ClusterConfig returns the REST config that reaches Cluster "<ws>/<name>"
// as the reviewer (through the upstream's cluster proxy).
type ClusterConfig func(ws, name string) (*rest.Config, error)

// Live asks each cluster whose agent the change deploys again what the head
// agent objects would really change there: a server-side dry run of each, as
// the controller applies them (field manager fleet, the agent Bundle's owner
// labels), as the reviewer. New and removed Clusters are skipped (no agent
// runs there yet, or it goes). A cluster that cannot be asked gets
// LiveError; the review goes on.
func (r *Report) Live(ctx context.Context, configFor ClusterConfig) {
	for i := range r.Clusters {
		c := &r.Clusters[i]
		if !c.Redeploy || c.Change == Added || c.Change == Removed || len(c.objects) == 0 {
			continue
		}
		ws, name, _ := strings.Cut(c.Key, "/")
		lines, err := dryRun(ctx, configFor, ws, name, c.objects)
		if err != nil {
			c.LiveError = err.Error()
			continue
		}
		c.Live = lines
	}
}

func dryRun(ctx context.Context, configFor ClusterConfig, ws, name string, objs []*unstructured.Unstructured) ([]string, error) {
	cfg, err := configFor(ws, name)
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		return nil, fmt.Errorf("a client for the cluster: %w", err)
	}
	m := apply.NewManager(c)
	copies := make([]*unstructured.Unstructured, 0, len(objs))
	for _, o := range objs {
		copies = append(copies, o.DeepCopy())
	}
	m.SetOwnerLabels(copies, names.AgentBundle(name), names.ClusterNamespace(ws, name))
	var out []string
	for _, o := range copies {
		entry, _, _, err := m.Diff(ctx, o, ssa.DefaultDiffOptions())
		if err != nil {
			return out, fmt.Errorf("dry run of %s %s: %w", o.GetKind(), objectName(o), err)
		}
		if entry.Action == ssa.UnchangedAction {
			continue
		}
		out = append(out, fmt.Sprintf("%s %s: %s", o.GetKind(), objectName(o), entry.Action))
	}
	if len(out) == 0 {
		out = []string{"nothing changes on the cluster"}
	}
	return out, nil
}

func objectName(o *unstructured.Unstructured) string {
	if o.GetNamespace() == "" {
		return o.GetName()
	}
	return o.GetNamespace() + "/" + o.GetName()
}
