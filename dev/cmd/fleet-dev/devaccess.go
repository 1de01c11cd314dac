package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/devcluster"
	"github.com/gitops-fleet/fleet/dev/devenv"
)

// The demo's last part: an upstream user reaches every registered cluster
// through the manager and directly (docs/operations.md, "Cluster access
// through the manager" and "Direct access").

const (
	demoUser  = "demo-admin"
	demoGroup = "demo-admins"
)

// demoCluster is one registered cluster of the demo.
type demoCluster struct {
	ws, name string
	dev      *devcluster.Cluster
	// direct is the Cluster's direct endpoint.
	direct fleet.DirectEndpointSpec
}

// demoNodeReader is the Bundle that lets fleet:demo-admins read nodes.
func demoNodeReader(ws string, clusters ...string) *fleet.Bundle {
	b := &fleet.Bundle{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "demo-node-reader"},
		Spec: fleet.BundleSpec{Resources: []fleet.BundleResource{{Name: "node-reader.yaml", Content: `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: demo-node-reader
rules:
  - apiGroups: [""]
    resources: ["nodes"]
    verbs: ["get", "list", "watch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: demo-node-reader
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: demo-node-reader
subjects:
  - apiGroup: rbac.authorization.k8s.io
    kind: Group
    name: fleet:` + demoGroup + `
`}}},
	}
	for _, c := range clusters {
		b.Spec.Targets = append(b.Spec.Targets, fleet.BundleTarget{ClusterName: c})
	}
	return b
}

func createIfMissing(ctx context.Context, c client.Client, objs ...client.Object) error {
	for _, o := range objs {
		if err := c.Create(ctx, o, client.FieldOwner("fleet-demo")); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}
	return nil
}

// nodeIP is the InternalIP of a dev cluster's node: where a hostPort is
// published.
func nodeIP(ctx context.Context, c *devcluster.Cluster) (string, error) {
	cs, err := c.Clientset()
	if err != nil {
		return "", err
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	for _, n := range nodes.Items {
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				return a.Address, nil
			}
		}
	}
	return "", fmt.Errorf("cluster %s: no node InternalIP", c.Name)
}

// demoAccess grants the demo user access to every cluster, turns on the
// direct endpoints (dev-1: the agent as its API server's token webhook,
// which `fleet-dev` wired; the others: served by the agent on a node port),
// and prints, per cluster, the `fleet kubeconfig` command and `kubectl get
// nodes` through the manager and directly.
func demoAccess(ctx context.Context, st *stepper, s *devcluster.State, f *devFlags, upc client.Client, dev2Name string) error {
	t := time.Now()
	up, dev1, dev2 := s.Clusters[0], s.Clusters[1], s.Clusters[2]
	ip, err := nodeIP(ctx, up)
	if err != nil {
		return err
	}
	clusters := []demoCluster{
		{ws: "fleet-local", name: "local", dev: up,
			direct: fleet.DirectEndpointSpec{URL: fmt.Sprintf("https://%s:%d", ip, up.DirectPort()), HostPort: int32(up.DirectPort())}},
		{ws: "fleet-default", name: "dev-1", dev: dev1,
			direct: fleet.DirectEndpointSpec{Mode: "webhook", URL: fmt.Sprintf("https://127.0.0.1:%d", dev1.APIPort), HostPort: int32(dev1.DirectPort())}},
		{ws: "fleet-default", name: dev2Name, dev: dev2,
			direct: fleet.DirectEndpointSpec{URL: fmt.Sprintf("https://%s:%d", ip, dev2.DirectPort()), HostPort: int32(dev2.DirectPort())}},
	}

	// Upstream: the demo group may use every Cluster's proxy and read
	// Clusters; downstream, fleet:demo-admins may read nodes (Bundles).
	reader := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "demo-cluster-reader"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{fleet.GroupVersion.Group}, Resources: []string{"clusters"}, Verbs: []string{"get", "list", "watch"}}}}
	group := []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "Group", Name: demoGroup}}
	if err := createIfMissing(ctx, upc, reader,
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "demo-cluster-reader"},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: reader.Name}, Subjects: group},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "demo-cluster-proxy"},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "fleet-cluster-proxy"}, Subjects: group},
		demoNodeReader("fleet-default", "dev-1", dev2Name),
		demoNodeReader("fleet-local", "local"),
	); err != nil {
		return fmt.Errorf("step 'grant the demo user access' failed: %w", err)
	}
	for _, c := range clusters {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cl := &fleet.Cluster{}
			if err := upc.Get(ctx, client.ObjectKey{Namespace: c.ws, Name: c.name}, cl); err != nil {
				return err
			}
			d := c.direct
			cl.Spec.AgentDirectEndpoint = &d
			// As a person would, under a manager of its own: the
			// controller's server-side applies are "fleet" (this binary's
			// default), and would take the field over and drop it.
			return upc.Update(ctx, cl, client.FieldOwner("fleet-demo"))
		})
		if err != nil {
			return fmt.Errorf("step 'direct endpoint of %s/%s' failed: %w", c.ws, c.name, err)
		}
	}
	for _, c := range clusters {
		err := devenv.Poll(ctx, 4*time.Minute, func() error {
			cl := &fleet.Cluster{}
			if err := upc.Get(ctx, client.ObjectKey{Namespace: c.ws, Name: c.name}, cl); err != nil {
				return err
			}
			if cl.Status.Agent.DirectEndpointCA == "" {
				return fmt.Errorf("the agent of %s/%s has not reported its direct endpoint yet", c.ws, c.name)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("step 'direct endpoint of %s/%s up' failed: %w\nread: kubectl --kubeconfig %s -n %s logs deploy/fleet-agent",
				c.ws, c.name, err, c.dev.KubeconfigPath(), devenv.SystemNamespace)
		}
	}
	st.printf("upstream  %s (group %s) may use every cluster; direct endpoints up: local and %s served by their agents, dev-1 by its API server with the agent as token webhook (%.1fs)",
		demoUser, demoGroup, dev2Name, time.Since(t).Seconds())

	userCfg, err := up.UserConfig(demoUser, demoGroup)
	if err != nil {
		return err
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["upstream"] = &clientcmdapi.Cluster{Server: userCfg.Host, CertificateAuthorityData: userCfg.CAData}
	kc.AuthInfos[demoUser] = &clientcmdapi.AuthInfo{ClientCertificateData: userCfg.CertData, ClientKeyData: userCfg.KeyData}
	kc.Contexts["upstream"] = &clientcmdapi.Context{Cluster: "upstream", AuthInfo: demoUser}
	kc.CurrentContext = "upstream"
	userKC := filepath.Join(s.Dir, demoUser+".kubeconfig")
	if err := clientcmd.WriteToFile(*kc, userKC); err != nil {
		return err
	}
	self, err := fleetBinary()
	if err != nil {
		return err
	}
	kubectl, err := filepath.Abs(filepath.Join(f.binDir, "kubectl"))
	if err != nil {
		return err
	}
	for _, c := range clusters {
		out := filepath.Join(s.Dir, "access-"+c.name+".kubeconfig")
		args := []string{"kubeconfig", "--kubeconfig", userKC, "--cluster", c.ws + "/" + c.name, "--output-file", out}
		if msg, err := exec.CommandContext(ctx, self, args...).CombinedOutput(); err != nil {
			return fmt.Errorf("step 'fleet kubeconfig for %s' failed: %v: %s", c.name, err, msg)
		}
		st.printf("%-9s fleet %s", c.dev.Name, strings.Join(args, " "))
		for _, path := range []struct{ what, context string }{{"through the manager", ""}, {"direct", c.name + "-direct"}} {
			kargs := []string{"--kubeconfig", out, "get", "nodes", "--request-timeout", "20s"}
			if path.context != "" {
				kargs = append(kargs, "--context", path.context)
			}
			var got []byte
			err := devenv.Poll(ctx, 3*time.Minute, func() error {
				var err error
				got, err = exec.CommandContext(ctx, kubectl, kargs...).CombinedOutput()
				if err != nil {
					return fmt.Errorf("%v: %s", err, strings.TrimSpace(string(got)))
				}
				return nil
			})
			if err != nil {
				return fmt.Errorf("step 'kubectl get nodes on %s %s' failed: %w", c.name, path.what, err)
			}
			st.printf("%-9s kubectl %s   (%s)\n%s", c.dev.Name, strings.Join(kargs, " "), path.what, strings.TrimRight(string(got), "\n"))
		}
	}
	return nil
}
