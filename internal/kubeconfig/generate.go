package kubeconfig

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

// Request is what `fleet kubeconfig` is asked for.
type Request struct {
	// Kubeconfig is the caller's kubeconfig file; empty: $KUBECONFIG (a
	// list of files, merged), then ~/.kube/config, as kubectl reads them.
	Kubeconfig string
	Cluster    ClusterRef
	Options
}

// Generate reads the caller's kubeconfig, builds the kubeconfig for the
// Cluster (ForCluster) and checks it as the caller upstream (Check). It
// returns the kubeconfig's YAML and what the caller should be warned of; a
// Cluster that does not exist is an error.
func Generate(ctx context.Context, req Request) ([]byte, []string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = req.Kubeconfig
	upstream, err := rules.Load()
	if err != nil {
		return nil, nil, fmt.Errorf("reading your kubeconfig: %w", err)
	}
	if len(upstream.Contexts) == 0 {
		return nil, nil, errors.New("your kubeconfig has no context (looked at --kubeconfig, $KUBECONFIG, ~/.kube/config): point it at the upstream (fleet management) cluster")
	}
	out, err := ForCluster(upstream, req.Cluster, req.Options)
	if err != nil {
		return nil, nil, err
	}
	ctxName := req.Context
	if ctxName == "" {
		ctxName = upstream.CurrentContext
	}
	cfg, err := clientcmd.NewNonInteractiveClientConfig(*upstream, ctxName, &clientcmd.ConfigOverrides{}, rules).ClientConfig()
	if err != nil {
		return nil, nil, fmt.Errorf("context %q: %w", ctxName, err)
	}
	warnings, err := Check(ctx, cfg, req.Cluster)
	if err != nil {
		return nil, nil, err
	}
	data, err := clientcmd.Write(*out)
	if err != nil {
		return nil, nil, err
	}
	return data, warnings, nil
}

// Check asks the upstream API server, as the caller (cfg), whether Cluster
// ref exists and whether the caller may use its proxy. A Cluster that does
// not exist is an error; a Cluster the caller may not read, or a proxy the
// caller may not use, is a warning: rights can come later, and the
// kubeconfig is still right.
func Check(ctx context.Context, cfg *rest.Config, ref ClusterRef) ([]string, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	var warnings []string
	err = cs.CoreV1().RESTClient().Get().
		AbsPath("/apis", fleet.GroupVersion.Group, fleet.GroupVersion.Version, "namespaces", ref.Workspace, "clusters", ref.Name).
		Do(ctx).Error()
	var status apierrors.APIStatus
	switch {
	case err == nil:
	case apierrors.IsNotFound(err) && errors.As(err, &status) && status.Status().Details != nil && status.Status().Details.Name == ref.Name:
		return nil, fmt.Errorf("no Cluster %q in workspace %q on %s (Cluster %s not found)", ref.Name, ref.Workspace, cfg.Host, ref)
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("reading Cluster %s: %s does not serve fleet.cattle.io Clusters: is your kubeconfig's context the fleet upstream (management) cluster? (%w)", ref, cfg.Host, err)
	case apierrors.IsForbidden(err):
		warnings = append(warnings, fmt.Sprintf("you may not read Cluster %q in workspace %q, so whether it exists is not checked", ref.Name, ref.Workspace))
	default:
		return nil, fmt.Errorf("reading Cluster %s on %s: %w", ref, cfg.Host, err)
	}

	review, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: ref.Workspace, Verb: "get", Group: fleet.GroupVersion.Group,
			Resource: "clusters", Subresource: "proxy", Name: ref.Name,
		}},
	}, metav1.CreateOptions{})
	switch {
	case err != nil:
		warnings = append(warnings, fmt.Sprintf("cannot check whether you may use Cluster %s through the proxy: %v", ref, err))
	case !review.Status.Allowed:
		warnings = append(warnings, fmt.Sprintf("you may not get clusters/proxy (fleet.cattle.io) on Cluster %q in workspace %q: requests with this kubeconfig get 403 until that right is bound to you upstream (ClusterRole fleet-cluster-proxy, or a Role with resourceNames [%s])",
			ref.Name, ref.Workspace, ref.Name))
	}
	return warnings, nil
}

// WriteFile writes a kubeconfig to path with mode 0600, replacing the file
// whole (never a half-written or more widely readable kubeconfig).
func WriteFile(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // no-op after the rename
	if err := f.Chmod(0o600); err != nil {
		_ = f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
