// Package devenv installs and registers the product on dev clusters the way
// users do: `helm install` of charts/fleet upstream, examples/gitops
// applied with kustomize (manager-initiated), `helm install` of
// charts/fleet-agent with a token's values (agent-initiated). `fleet-dev
// demo` and the e2e suite share it.
package devenv

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/fluxcd/pkg/ssa"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/devcluster"
	"github.com/gitops-fleet/fleet/internal/apply"
	"github.com/gitops-fleet/fleet/internal/registration"
	"github.com/gitops-fleet/fleet/internal/scheme"
)

// SystemNamespace is where the controller and manager-initiated agents run.
const SystemNamespace = "cattle-fleet-system"

// Env is a dev environment with the product's paths.
type Env struct {
	State *devcluster.State
	// RepoDir is the repository root (charts/, examples/).
	RepoDir string
	// Helm is the helm CLI.
	Helm string
}

// Upstream is the environment's first cluster.
func (e *Env) Upstream() *devcluster.Cluster { return e.State.Clusters[0] }

// Client is a controller-runtime client with the fleet types for c.
func Client(c *devcluster.Cluster) (client.Client, error) {
	cfg, err := c.RESTConfig()
	if err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: scheme.Scheme})
}

func (e *Env) helm(c *devcluster.Cluster, args ...string) error {
	cmd := exec.Command(e.Helm, append(args, "--kubeconfig", c.KubeconfigPath())...)
	dir := filepath.Join(c.Dir, "helm")
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+dir, "HELM_CONFIG_HOME="+dir, "HELM_DATA_HOME="+dir)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("helm %s: %v\n%s", strings.Join(args[:2], " "), err, out.String())
	}
	return nil
}

// InstallController runs `helm upgrade --install fleet charts/fleet` in the
// upstream cluster with the image `make images` imported into the nodes
// (the chart's default: its appVersion; never pulled), telling agents to
// reach the upstream through its Service address with strict TLS. set adds
// --set values.
func (e *Env) InstallController(ctx context.Context, set ...string) error {
	up := e.Upstream()
	caFile := filepath.Join(up.Dir, "pki", "ca.crt")
	args := []string{"upgrade", "--install", "fleet", filepath.Join(e.RepoDir, "charts", "fleet"),
		"-n", SystemNamespace, "--create-namespace",
		"--set", "image.imagePullPolicy=Never",
		"--set", "agent.image.imagePullPolicy=Never", "--set", "agent.tlsMode=strict",
		"--set", "apiServerURL=" + up.Server(), "--set-file", "apiServerCA=" + caFile,
		"--wait", "--timeout", "3m"}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	if err := e.helm(up, args...); err != nil {
		return fmt.Errorf("%w\n%s", err, PodReport(ctx, up, SystemNamespace))
	}
	return nil
}

// PodReport says, for every pod of namespace ns in c that is not ready,
// why (phase, container states, the last lines of its logs): what a
// failed `helm --wait` or rollout leaves to read.
func PodReport(ctx context.Context, c *devcluster.Cluster, ns string) string {
	cs, err := c.Clientset()
	if err != nil {
		return "pods: " + err.Error()
	}
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "pods: " + err.Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "pods in %s of %s:\n", ns, c.Name)
	for i := range pods.Items {
		p := &pods.Items[i]
		ready := false
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
				ready = true
			}
		}
		fmt.Fprintf(&b, "- %s: %s, ready %v\n", p.Name, p.Status.Phase, ready)
		if ready {
			continue
		}
		for _, cond := range p.Status.Conditions {
			if cond.Status != corev1.ConditionTrue && cond.Message != "" {
				fmt.Fprintf(&b, "    %s: %s %s\n", cond.Type, cond.Reason, cond.Message)
			}
		}
		for _, st := range p.Status.ContainerStatuses {
			switch {
			case st.State.Waiting != nil:
				fmt.Fprintf(&b, "    %s waiting: %s %s (restarts %d)\n", st.Name, st.State.Waiting.Reason, st.State.Waiting.Message, st.RestartCount)
			case st.State.Terminated != nil:
				fmt.Fprintf(&b, "    %s terminated: %s exit %d\n", st.Name, st.State.Terminated.Reason, st.State.Terminated.ExitCode)
			}
			for _, previous := range []bool{false, true} {
				if previous && st.RestartCount == 0 {
					continue
				}
				logs, err := cs.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: st.Name, Previous: previous, TailLines: ptr.To[int64](15)}).DoRaw(ctx)
				if err == nil && len(logs) > 0 {
					fmt.Fprintf(&b, "    logs of %s (previous %v):\n      %s\n", st.Name, previous, strings.ReplaceAll(strings.TrimSpace(string(logs)), "\n", "\n      "))
				}
			}
		}
	}
	return b.String()
}

// BuildGitops builds dir (examples/gitops) with kustomize, as a GitOps tool
// would, replacing the `value` of the named kubeconfig Secrets: the example
// repository holds placeholders where a real one holds encrypted Secrets.
func BuildGitops(dir string, kubeconfigs map[string][]byte) ([]*unstructured.Unstructured, error) {
	opts := krusty.MakeDefaultOptions()
	resMap, err := krusty.MakeKustomizer(opts).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	manifests, err := resMap.AsYaml()
	if err != nil {
		return nil, err
	}
	objs, err := apply.ReadObjects(manifests)
	if err != nil {
		return nil, err
	}
	found := map[string]bool{}
	for _, o := range objs {
		if o.GetKind() != "Secret" {
			continue
		}
		if kc, ok := kubeconfigs[o.GetName()]; ok {
			unstructured.RemoveNestedField(o.Object, "data")
			if err := unstructured.SetNestedField(o.Object, map[string]any{"value": string(kc)}, "stringData"); err != nil {
				return nil, err
			}
			found[o.GetName()] = true
		}
	}
	for name := range kubeconfigs {
		if !found[name] {
			return nil, fmt.Errorf("%s has no Secret %q to hold the kubeconfig", dir, name)
		}
	}
	return objs, nil
}

// Apply applies objs to c with server-side apply, in dependency order.
func Apply(ctx context.Context, c client.Client, objs []*unstructured.Unstructured) error {
	_, err := apply.NewManager(c).ApplyAllStaged(ctx, objs, ssa.DefaultApplyOptions())
	return err
}

// TokenValues waits for the ClusterRegistrationToken's values Secret and
// returns the values file it holds (what `kubectl get secret -o
// jsonpath='{.data.values}' | base64 -d` gives users).
func TokenValues(ctx context.Context, c client.Client, ns, token string) ([]byte, error) {
	var values []byte
	err := Poll(ctx, time.Minute, func() error {
		tok := &fleet.ClusterRegistrationToken{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: token}, tok); err != nil {
			return err
		}
		if tok.Status.SecretName == "" {
			return fmt.Errorf("token %s/%s has no values Secret yet", ns, token)
		}
		s := &corev1.Secret{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: tok.Status.SecretName}, s); err != nil {
			return err
		}
		values = s.Data[registration.TokenValuesKey]
		return nil
	})
	return values, err
}

// InstallAgent runs `helm upgrade --install fleet-agent charts/fleet-agent
// -n <ns> -f values.yaml --set ...` in the downstream cluster ds.
func (e *Env) InstallAgent(ctx context.Context, ds *devcluster.Cluster, ns string, values []byte, set ...string) error {
	f := filepath.Join(ds.Dir, "token-values.yaml")
	if err := os.WriteFile(f, values, 0o600); err != nil {
		return err
	}
	args := []string{"upgrade", "--install", "fleet-agent", filepath.Join(e.RepoDir, "charts", "fleet-agent"),
		"-n", ns, "--create-namespace", "-f", f, "--set", "internal.systemNamespace=" + ns}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	return e.helm(ds, args...)
}

// UninstallAgent runs `helm uninstall fleet-agent -n <ns> --wait` in the
// downstream cluster ds.
func (e *Env) UninstallAgent(ctx context.Context, ds *devcluster.Cluster, ns string) error {
	return e.helm(ds, "uninstall", "fleet-agent", "-n", ns, "--wait", "--timeout", "2m")
}

// ClusterReady waits for the fleet Cluster to be Ready and returns it.
func ClusterReady(ctx context.Context, c client.Client, ns, name string, timeout time.Duration) (*fleet.Cluster, error) {
	cl := &fleet.Cluster{}
	err := Poll(ctx, timeout, func() error {
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cl); err != nil {
			return err
		}
		return conditionTrue(cl.Status.Conditions, "cluster "+ns+"/"+name)
	})
	return cl, err
}

// ClusterByClientID waits for the Cluster registered under clientID.
func ClusterByClientID(ctx context.Context, c client.Client, ns, clientID string, timeout time.Duration) (*fleet.Cluster, error) {
	var found *fleet.Cluster
	err := Poll(ctx, timeout, func() error {
		list := &fleet.ClusterList{}
		if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
			return err
		}
		for i := range list.Items {
			if list.Items[i].Spec.ClientID == clientID {
				found = &list.Items[i]
				return conditionTrue(found.Status.Conditions, "cluster "+found.Name)
			}
		}
		return fmt.Errorf("no cluster with clientID %s in %s yet", clientID, ns)
	})
	return found, err
}

// BundleReady waits for the Bundle to be Ready on want clusters.
func BundleReady(ctx context.Context, c client.Client, ns, name string, want int, timeout time.Duration) error {
	return Poll(ctx, timeout, func() error {
		b := &fleet.Bundle{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, b); err != nil {
			return err
		}
		if b.Status.Summary.Ready != want || b.Status.Summary.DesiredReady != want {
			return fmt.Errorf("bundle %s/%s ready on %d of %d clusters, want %d", ns, name, b.Status.Summary.Ready, b.Status.Summary.DesiredReady, want)
		}
		return conditionTrue(b.Status.Conditions, "bundle "+ns+"/"+name)
	})
}

func conditionTrue(conds []metav1.Condition, what string) error {
	ready := meta.FindStatusCondition(conds, "Ready")
	if ready == nil {
		return fmt.Errorf("%s has no Ready condition yet", what)
	}
	if ready.Status != metav1.ConditionTrue {
		return fmt.Errorf("%s not Ready: %s: %s", what, ready.Reason, ready.Message)
	}
	return nil
}

// Poll calls check until it succeeds or timeout passes; the error names
// the last reason.
func Poll(ctx context.Context, timeout time.Duration, check func() error) error {
	return PollEvery(ctx, 250*time.Millisecond, timeout, check)
}

// PollEvery is Poll checking every interval.
func PollEvery(ctx context.Context, interval, timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s: %w", timeout, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(interval):
		}
	}
}
