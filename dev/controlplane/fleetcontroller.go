package controlplane

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/fluxcd/pkg/ssa"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"

	"github.com/gitops-fleet/fleet/internal/apply"
	"github.com/gitops-fleet/fleet/renderer"
)

// FleetControllerIdentity installs the controller's ServiceAccount and RBAC
// exactly as charts/fleet renders them with its default values (in
// namespace, the release namespace), the local cluster's identity
// fleet-controller-bootstrap included, and returns a REST config that acts
// as the controller's ServiceAccount. A controller run with it has the
// rights the chart gives it and no more, so a suite run so proves the
// chart's rules suffice.
func (cp *ControlPlane) FleetControllerIdentity(ctx context.Context, namespace string) (*rest.Config, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	ch, err := renderer.LoadChartDir(filepath.Join(root, "charts", "fleet"))
	if err != nil {
		return nil, err
	}
	out, err := renderer.Render(renderer.Input{Chart: ch, ReleaseName: "fleet", Namespace: namespace})
	if err != nil {
		return nil, err
	}
	objs, err := out.Objects()
	if err != nil {
		return nil, err
	}
	ns := &unstructured.Unstructured{}
	ns.SetAPIVersion("v1")
	ns.SetKind("Namespace")
	ns.SetName(namespace)
	keep := []*unstructured.Unstructured{ns}
	for _, o := range objs {
		switch o.GetKind() {
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
			keep = append(keep, o.DeepCopy())
		}
	}
	if _, err := apply.NewManager(cp.Client).ApplyAllStaged(ctx, keep, ssa.DefaultApplyOptions()); err != nil {
		return nil, fmt.Errorf("installing the controller's RBAC on %s: %w", cp.Name, err)
	}
	token, err := cp.ServiceAccountToken(ctx, namespace, "fleet-controller", 48*time.Hour)
	if err != nil {
		return nil, err
	}
	cfg := cp.ConfigForToken(token)
	cfg.UserAgent = "fleet-controller"
	return cfg, nil
}
