// Package controlplane starts local Kubernetes control planes for tests, the
// benchmarks and the development environment: one upstream and N downstream
// clusters on loopback, each a real kube-apiserver and etcd (through
// controller-runtime envtest) with a kube-controller-manager beside it, so
// ownerReference garbage collection, namespace deletion and default
// ServiceAccounts behave as in a real cluster. Nothing schedules pods.
//
// The binaries come from bin/ (built by `make controlplane-bins` from the Go
// module proxy); FLEET_BIN_DIR overrides the directory.
package controlplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fluxcd/pkg/ssa"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/gitops-fleet/fleet/internal/apply"
	"github.com/gitops-fleet/fleet/internal/scheme"
)

// Scheme knows the core Kubernetes kinds and the fleet.cattle.io kinds.
var Scheme = scheme.Scheme

// Options configure Start.
type Options struct {
	// Downstreams is the number of downstream control planes.
	Downstreams int
	// BinDir holds kube-apiserver, etcd and kube-controller-manager.
	// Default: $FLEET_BIN_DIR, else bin/ at the repository root.
	BinDir string
	// ManifestDirs are applied to the upstream after it starts, in order
	// (CRDs first). Default: kustomize/base/crds, policies and rbac.
	ManifestDirs []string
	// NoControllerManager skips the kube-controller-manager.
	NoControllerManager bool
	// APIServerFlags are extra kube-apiserver flags, "name=value".
	APIServerFlags []string
	// DownstreamAPIServerFlags are more, for the downstreams only.
	DownstreamAPIServerFlags []string
}

// Env is a running upstream and its downstreams.
type Env struct {
	Upstream    *ControlPlane
	Downstreams []*ControlPlane
}

// ControlPlane is one running kube-apiserver + etcd (+ controller-manager).
type ControlPlane struct {
	// Name is "upstream" or "downstream-<i>".
	Name string
	// Config is an admin (system:masters) REST config.
	Config *rest.Config
	// Client is an admin client that knows the fleet kinds.
	Client client.Client
	// Clientset is an admin typed clientset.
	Clientset kubernetes.Interface
	// Kubeconfig is an admin kubeconfig file's content.
	Kubeconfig []byte

	env    *envtest.Environment
	kcm    *exec.Cmd
	kcmLog string
	dir    string
	kcmErr chan error

	frontProxy *frontProxy
}

// Start starts the upstream and opts.Downstreams downstream control planes in
// parallel. On error, whatever started is stopped.
func Start(ctx context.Context, opts Options) (*Env, error) {
	root, err := RepoRoot()
	if err != nil && (opts.BinDir == "" || opts.ManifestDirs == nil) {
		return nil, err
	}
	if opts.BinDir == "" {
		opts.BinDir = os.Getenv("FLEET_BIN_DIR")
	}
	if opts.BinDir == "" {
		opts.BinDir = filepath.Join(root, "bin")
	}
	if opts.ManifestDirs == nil {
		opts.ManifestDirs = []string{
			filepath.Join(root, "kustomize", "base", "crds"),
			filepath.Join(root, "kustomize", "base", "policies"),
			filepath.Join(root, "kustomize", "base", "rbac"),
		}
	}
	for _, b := range []string{"kube-apiserver", "etcd", "kube-controller-manager"} {
		if _, err := os.Stat(filepath.Join(opts.BinDir, b)); err != nil {
			return nil, fmt.Errorf("control-plane binary %s not found in %s: run `make controlplane-bins` first: %w", b, opts.BinDir, err)
		}
	}

	env := &Env{}
	names := []string{"upstream"}
	for i := 1; i <= opts.Downstreams; i++ {
		names = append(names, fmt.Sprintf("downstream-%d", i))
	}
	planes := make([]*ControlPlane, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var manifests []string
			if i == 0 {
				manifests = opts.ManifestDirs
			}
			planes[i], errs[i] = startOne(ctx, name, opts, manifests)
		}()
	}
	wg.Wait()
	env.Upstream = planes[0]
	env.Downstreams = planes[1:]
	if err := errors.Join(errs...); err != nil {
		_ = env.Stop()
		return nil, err
	}
	return env, nil
}

// All returns the upstream followed by the downstreams.
func (e *Env) All() []*ControlPlane {
	return append([]*ControlPlane{e.Upstream}, e.Downstreams...)
}

// Stop stops every control plane of the environment.
func (e *Env) Stop() error {
	var errs []error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, cp := range e.All() {
		if cp == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := cp.Stop(); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func startOne(ctx context.Context, name string, opts Options, manifestDirs []string) (*ControlPlane, error) {
	dir, err := os.MkdirTemp("", "fleet-"+name+"-")
	if err != nil {
		return nil, err
	}
	cp := &ControlPlane{Name: name, dir: dir}
	cp.env = &envtest.Environment{
		BinaryAssetsDirectory:    opts.BinDir,
		UseExistingCluster:       ptr.To(false),
		ControlPlaneStartTimeout: 60 * time.Second,
		ControlPlaneStopTimeout:  30 * time.Second,
		Scheme:                   Scheme,
	}
	api := cp.env.ControlPlane.GetAPIServer()
	if cp.frontProxy, err = newFrontProxy(dir); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("making the front-proxy certificates of %s: %w", name, err)
	}
	for _, f := range cp.frontProxy.flags() {
		api.Configure().Set(f[0], f[1])
	}
	flags := opts.APIServerFlags
	if name != "upstream" {
		flags = append(slices.Clone(flags), opts.DownstreamAPIServerFlags...)
	}
	for _, f := range flags {
		k, v, _ := strings.Cut(f, "=")
		api.Configure().Append(k, v)
	}
	if len(manifestDirs) > 0 {
		cp.env.CRDDirectoryPaths = manifestDirs[:1]
		cp.env.ErrorIfCRDPathMissing = true
	}
	cfg, err := cp.env.Start()
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("starting %s control plane: %w", name, err)
	}
	cfg.QPS, cfg.Burst = 1000, 2000
	cp.Config = cfg
	if cp.Client, err = client.New(cfg, client.Options{Scheme: Scheme}); err != nil {
		_ = cp.Stop()
		return nil, err
	}
	if cp.Clientset, err = kubernetes.NewForConfig(cfg); err != nil {
		_ = cp.Stop()
		return nil, err
	}
	if cp.Kubeconfig, err = KubeconfigFor(cfg, name); err != nil {
		_ = cp.Stop()
		return nil, err
	}
	if !opts.NoControllerManager {
		if err := cp.startControllerManager(opts.BinDir); err != nil {
			_ = cp.Stop()
			return nil, fmt.Errorf("starting %s kube-controller-manager: %w", name, err)
		}
	}
	for _, d := range manifestDirs[min(1, len(manifestDirs)):] {
		if err := applyDir(ctx, cp, d); err != nil {
			_ = cp.Stop()
			return nil, err
		}
	}
	return cp, nil
}

// startControllerManager runs only the controllers that make an API server
// behave like a cluster without running pods: garbage collection, namespace
// deletion and default ServiceAccounts.
func (cp *ControlPlane) startControllerManager(binDir string) error {
	user, err := cp.env.AddUser(envtest.User{Name: "kube-controller-manager", Groups: []string{"system:masters"}}, cp.Config)
	if err != nil {
		return err
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return err
	}
	kcPath := filepath.Join(cp.dir, "kcm.kubeconfig")
	if err := os.WriteFile(kcPath, kc, 0o600); err != nil {
		return err
	}
	cp.kcmLog = filepath.Join(cp.dir, "kube-controller-manager.log")
	logf, err := os.Create(cp.kcmLog)
	if err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(binDir, "kube-controller-manager"),
		"--kubeconfig="+kcPath,
		"--authentication-kubeconfig="+kcPath,
		"--authorization-kubeconfig="+kcPath,
		"--secure-port=0",
		"--leader-elect=false",
		"--use-service-account-credentials=false",
		"--controllers=garbagecollector,namespace,serviceaccount",
		"--concurrent-namespace-syncs=5",
		"--concurrent-gc-syncs=5",
		// Above the default 20/s: a bench or test that makes thousands of
		// namespaces waits for their default ServiceAccounts.
		"--kube-api-qps=200",
		"--kube-api-burst=400",
		"--v=1",
	)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Die with the test binary, even when it is killed (go test -timeout).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	cp.kcm = cmd
	cp.kcmErr = make(chan error, 1)
	go func() {
		cp.kcmErr <- cmd.Wait()
		logf.Close()
	}()
	return nil
}

// Stop stops the controller-manager, the API server and etcd, and removes the
// control plane's files.
func (cp *ControlPlane) Stop() error {
	var errs []error
	if cp.kcm != nil && cp.kcm.Process != nil {
		_ = cp.kcm.Process.Signal(os.Interrupt)
		select {
		case <-cp.kcmErr:
		case <-time.After(10 * time.Second):
			_ = cp.kcm.Process.Kill()
			<-cp.kcmErr
		}
		cp.kcm = nil
	}
	if cp.env != nil {
		if err := cp.env.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("stopping %s: %w", cp.Name, err))
		}
		cp.env = nil
	}
	if cp.dir != "" {
		_ = os.RemoveAll(cp.dir)
	}
	return errors.Join(errs...)
}

// ControllerManagerLog returns the kube-controller-manager's output so far,
// for test failure messages.
func (cp *ControlPlane) ControllerManagerLog() string {
	b, _ := os.ReadFile(cp.kcmLog)
	return string(b)
}

// KubeconfigSecret returns a Secret in Cluster API format (key "value") that
// holds this control plane's admin kubeconfig, for the upstream to reach it.
func (cp *ControlPlane) KubeconfigSecret(namespace, name string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Data:       map[string][]byte{"value": bytes.Clone(cp.Kubeconfig)},
	}
}

// ServiceAccountToken returns a bound token for a ServiceAccount from the
// TokenRequest API.
func (cp *ControlPlane) ServiceAccountToken(ctx context.Context, namespace, name string, ttl time.Duration) (string, error) {
	tr, err := cp.Clientset.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(ttl.Seconds()))},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("requesting token for serviceaccount %s/%s: %w", namespace, name, err)
	}
	return tr.Status.Token, nil
}

// ConfigForToken returns a REST config that authenticates with a bearer token
// and trusts this control plane's CA.
func (cp *ControlPlane) ConfigForToken(token string) *rest.Config {
	return &rest.Config{
		Host:            cp.Config.Host,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: cp.Config.CAData},
		QPS:             cp.Config.QPS,
		Burst:           cp.Config.Burst,
	}
}

// KubeconfigFor serialises a REST config that uses client certificates or a
// bearer token into a kubeconfig file.
func KubeconfigFor(cfg *rest.Config, name string) ([]byte, error) {
	kc := clientcmdapi.NewConfig()
	kc.Clusters[name] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{
		ClientCertificateData: cfg.CertData,
		ClientKeyData:         cfg.KeyData,
		Token:                 cfg.BearerToken,
	}
	kc.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	kc.CurrentContext = name
	return clientcmd.Write(*kc)
}

// RepoRoot finds the repository root by walking up from the working
// directory to the go.mod of this module.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(b, []byte("module github.com/gitops-fleet/fleet\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("cannot find the repository root (go.mod of github.com/gitops-fleet/fleet) above the working directory")
		}
		dir = parent
	}
}

// applyDir server-side applies every YAML file of a directory.
func applyDir(ctx context.Context, cp *ControlPlane, dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("reading manifests: %w", err)
	}
	var objs []*unstructured.Unstructured
	for _, e := range entries {
		if e.IsDir() || !(strings.HasSuffix(e.Name(), ".yaml") || strings.HasSuffix(e.Name(), ".yml")) || e.Name() == "kustomization.yaml" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		o, err := apply.ReadObjects(b)
		if err != nil {
			return fmt.Errorf("%s: %w", e.Name(), err)
		}
		objs = append(objs, o...)
	}
	if _, err := apply.NewManager(cp.Client).ApplyAllStaged(ctx, objs, ssa.DefaultApplyOptions()); err != nil {
		return fmt.Errorf("applying %s to %s: %w", dir, cp.Name, err)
	}
	return nil
}
