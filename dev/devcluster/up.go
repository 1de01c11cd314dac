package devcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Options configure bringing an environment up.
type Options struct {
	// BinDir holds etcd, kube-apiserver, kube-controller-manager,
	// kube-scheduler and kubelet (`make dev-bins`).
	BinDir string
	// Images are image archives (`make images`) imported into every node.
	Images []string
	// Progress, when set, gets one line per finished step.
	Progress func(cluster, step string, took time.Duration)
	// DirectWebhook names the clusters whose API server uses the fleet
	// agent's direct endpoint as its token webhook (direct.go).
	DirectWebhook []string
}

// Up brings up every cluster of s in parallel, after removing whatever a
// previous environment in the same directory left behind.
func Up(ctx context.Context, s *State, opts Options) error {
	if err := Preflight(); err != nil {
		return err
	}
	if _, err := Down(s.Dir); err != nil {
		return fmt.Errorf("cleaning up the previous environment in %s: %w", s.Dir, err)
	}
	if err := s.save(); err != nil {
		return err
	}
	errs := make(chan error, len(s.Clusters))
	for _, c := range s.Clusters {
		go func() { errs <- c.up(ctx, s.tag(), opts) }()
	}
	var first error
	for range s.Clusters {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (c *Cluster) up(ctx context.Context, tag string, opts Options) error {
	step := func(name string, since time.Time) {
		if opts.Progress != nil {
			opts.Progress(c.Name, name, time.Since(since))
		}
	}
	bin := func(name string) string { return filepath.Join(opts.BinDir, name) }
	for _, name := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet"} {
		if _, err := os.Stat(bin(name)); err != nil {
			return fmt.Errorf("%s: %s is missing: run `make dev-bins`", c.Name, bin(name))
		}
	}
	t := time.Now()
	for _, d := range []string{"logs", "etcd", "containerd", "cni", "cni-ipam", "kubelet", "pod-logs", "runc"} {
		if err := os.MkdirAll(filepath.Join(c.Dir, d), 0o755); err != nil {
			return err
		}
	}
	p, err := newPKI(filepath.Join(c.Dir, "pki"), net.ParseIP(c.ServiceIP))
	if err != nil {
		return fmt.Errorf("%s: certificates: %w", c.Name, err)
	}
	if err := c.writeKubeconfigs(); err != nil {
		return err
	}
	if err := c.writeConfigs(p); err != nil {
		return err
	}
	if err := c.makeCgroups(); err != nil {
		return fmt.Errorf("%s: %w", c.Name, err)
	}
	if err := c.makeBridge(); err != nil {
		return fmt.Errorf("%s: bridge: %w", c.Name, err)
	}
	if err := c.addNAT(tag); err != nil {
		return fmt.Errorf("%s: iptables: %w", c.Name, err)
	}
	step("certificates, cgroups, bridge "+c.Bridge+", DNAT "+c.ServiceIP, t)

	t = time.Now()
	ctrd, err := c.start("containerd", "containerd", "--config", filepath.Join(c.Dir, "containerd.toml"))
	if err != nil {
		return err
	}
	etcd, err := c.start("etcd", bin("etcd"), c.etcdArgs()...)
	if err != nil {
		return err
	}
	apiArgs := c.apiserverArgs(p)
	webhook := slices.Contains(opts.DirectWebhook, c.Name)
	if webhook {
		flags, err := c.writeDirectWebhook()
		if err != nil {
			return fmt.Errorf("%s: direct endpoint webhook: %w", c.Name, err)
		}
		apiArgs = append(apiArgs, flags...)
	}
	api, err := c.start("kube-apiserver", bin("kube-apiserver"), apiArgs...)
	if err != nil {
		return err
	}
	if err := waitFor(ctx, 60*time.Second, func() error {
		if err := firstErr(ctrd.failed(), etcd.failed(), api.failed()); err != nil {
			return err
		}
		if _, err := os.Stat(c.sock()); err != nil {
			return fmt.Errorf("containerd socket not there yet")
		}
		return nil
	}); err != nil {
		return fmt.Errorf("%s: %w", c.Name, err)
	}
	for _, img := range opts.Images {
		if err := run("ctr", "--address", c.sock(), "-n", "k8s.io", "images", "import", img); err != nil {
			return fmt.Errorf("%s: importing %s: %w (read %s)", c.Name, img, err, c.LogPath("containerd"))
		}
	}
	step("containerd up, images imported", t)

	cs, err := c.Clientset()
	if err != nil {
		return err
	}
	if err := waitFor(ctx, 90*time.Second, func() error {
		if err := firstErr(etcd.failed(), api.failed()); err != nil {
			return err
		}
		return cs.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).Error()
	}); err != nil {
		return fmt.Errorf("%s: API server not ready: %w (read %s)", c.Name, err, api.log)
	}
	step(fmt.Sprintf("etcd and kube-apiserver ready on 127.0.0.1:%d", c.APIPort), t)
	if webhook {
		if err := c.installDirectTLS(ctx, cs); err != nil {
			return fmt.Errorf("%s: the direct endpoint's certificate: %w", c.Name, err)
		}
	}

	t = time.Now()
	kcm, err := c.start("kube-controller-manager", bin("kube-controller-manager"), c.kcmArgs(p)...)
	if err != nil {
		return err
	}
	sched, err := c.start("kube-scheduler", bin("kube-scheduler"), c.schedulerArgs()...)
	if err != nil {
		return err
	}
	kubelet, err := c.start("kubelet", bin("kubelet"),
		"--config", filepath.Join(c.Dir, "kubelet.yaml"), "--kubeconfig", c.KubeconfigPath(),
		"--hostname-override=localhost", "--root-dir", filepath.Join(c.Dir, "kubelet"),
		"--cert-dir", filepath.Join(c.Dir, "kubelet", "pki"))
	if err != nil {
		return err
	}
	if err := waitFor(ctx, 120*time.Second, func() error {
		if err := firstErr(kcm.failed(), sched.failed(), kubelet.failed(), ctrd.failed(), api.failed()); err != nil {
			return err
		}
		node, err := cs.CoreV1().Nodes().Get(ctx, "localhost", metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("node not registered yet: %w", err)
		}
		ready := false
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				ready = true
			}
		}
		if !ready {
			return fmt.Errorf("node not Ready yet")
		}
		if _, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{}); err != nil {
			return fmt.Errorf("no default ServiceAccount yet: %w", err)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("%s: node not Ready: %w (read %s)", c.Name, err, c.LogPath("kubelet"))
	}
	step("node Ready (kube-controller-manager, kube-scheduler, kubelet)", t)
	return nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func waitFor(ctx context.Context, timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return nil
		}
		if errors.As(err, new(*exitedError)) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// RESTConfig is an admin config for the cluster from the host.
func (c *Cluster) RESTConfig() (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.KubeconfigPath())
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = 100, 200
	return cfg, nil
}

// Clientset is an admin clientset for the cluster.
func (c *Cluster) Clientset() (*kubernetes.Clientset, error) {
	cfg, err := c.RESTConfig()
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// PortableKubeconfig is an admin kubeconfig that works from the host and
// from the pods of every dev cluster: it names the Service address.
func (c *Cluster) PortableKubeconfig() ([]byte, error) {
	return c.kubeconfig(c.Server())
}

func (c *Cluster) kubeconfig(server string) ([]byte, error) {
	pkiDir := filepath.Join(c.Dir, "pki")
	read := func(name string) ([]byte, error) { return os.ReadFile(filepath.Join(pkiDir, name)) }
	ca, err := read("ca.crt")
	if err != nil {
		return nil, err
	}
	cert, err := read("admin.crt")
	if err != nil {
		return nil, err
	}
	key, err := read("admin.key")
	if err != nil {
		return nil, err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[c.Name] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key}
	cfg.Contexts[c.Name] = &clientcmdapi.Context{Cluster: c.Name, AuthInfo: "admin"}
	cfg.CurrentContext = c.Name
	return clientcmd.Write(*cfg)
}

func (c *Cluster) writeKubeconfigs() error {
	b, err := c.kubeconfig(fmt.Sprintf("https://127.0.0.1:%d", c.APIPort))
	if err != nil {
		return err
	}
	if err := os.WriteFile(c.KubeconfigPath(), b, 0o600); err != nil {
		return err
	}
	// Also next to the state directory, where users look for it.
	return os.WriteFile(filepath.Join(filepath.Dir(c.Dir), c.Name+".kubeconfig"), b, 0o600)
}

func (c *Cluster) etcdArgs() []string {
	client := fmt.Sprintf("http://127.0.0.1:%d", c.EtcdPort)
	peer := fmt.Sprintf("http://127.0.0.1:%d", c.EtcdPeerPort)
	return []string{
		"--name=" + c.Name, "--data-dir=" + filepath.Join(c.Dir, "etcd"),
		"--listen-client-urls=" + client, "--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=" + c.Name + "=" + peer,
		// A dev cluster's data is thrown away: fsync buys nothing but latency.
		"--unsafe-no-fsync", "--log-level=warn",
	}
}

func (c *Cluster) apiserverArgs(p *pki) []string {
	return []string{
		"--etcd-servers=" + fmt.Sprintf("http://127.0.0.1:%d", c.EtcdPort),
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port=" + strconv.Itoa(c.APIPort),
		// The loopback address cannot be an endpoint of the kubernetes Service;
		// iptables DNAT stands in for kube-proxy instead.
		"--endpoint-reconciler-type=none",
		"--service-cluster-ip-range=" + c.ServiceCIDR,
		"--cert-dir=" + filepath.Join(c.Dir, "pki", "apiserver-generated"),
		"--tls-cert-file=" + p.path("apiserver.crt"), "--tls-private-key-file=" + p.path("apiserver.key"),
		"--client-ca-file=" + p.path("ca.crt"),
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + p.path("sa.pub"), "--service-account-signing-key-file=" + p.path("sa.key"),
		"--authorization-mode=Node,RBAC",
		"--kubelet-client-certificate=" + p.path("admin.crt"), "--kubelet-client-key=" + p.path("admin.key"),
		"--kubelet-certificate-authority=" + p.path("ca.crt"),
		"--kubelet-preferred-address-types=Hostname",
		// The aggregation layer, as kubeadm, k3s and managed clusters run it:
		// fleet-proxy is an aggregated API server.
		"--requestheader-client-ca-file=" + p.path("front-proxy-ca.crt"),
		"--requestheader-allowed-names=" + frontProxyClientName,
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + p.path("front-proxy-client.crt"),
		"--proxy-client-key-file=" + p.path("front-proxy-client.key"),
		// No kube-proxy: the aggregator dials an aggregated server's
		// endpoints (pod IPs) directly.
		"--enable-aggregator-routing=true",
		"--profiling=false", "--v=1",
	}
}

func (c *Cluster) kcmArgs(p *pki) []string {
	kc := c.KubeconfigPath()
	return []string{
		"--kubeconfig=" + kc, "--authentication-kubeconfig=" + kc, "--authorization-kubeconfig=" + kc,
		"--controllers=*", "--root-ca-file=" + p.path("ca.crt"),
		"--service-account-private-key-file=" + p.path("sa.key"),
		"--cluster-signing-cert-file=" + p.path("ca.crt"), "--cluster-signing-key-file=" + p.path("ca.key"),
		"--use-service-account-credentials=true", "--leader-elect=false",
		"--service-cluster-ip-range=" + c.ServiceCIDR,
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(c.KCMPort),
		"--cert-dir=" + filepath.Join(c.Dir, "pki", "kcm-generated"), "--v=1",
	}
}

func (c *Cluster) schedulerArgs() []string {
	kc := c.KubeconfigPath()
	return []string{
		"--kubeconfig=" + kc, "--authentication-kubeconfig=" + kc, "--authorization-kubeconfig=" + kc,
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(c.SchedulerPort), "--leader-elect=false",
		"--cert-dir=" + filepath.Join(c.Dir, "pki", "scheduler-generated"), "--v=1",
	}
}

func (c *Cluster) writeConfigs(p *pki) error {
	d := c.Dir
	containerd := fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = %[3]q
[ttrpc]
  address = %[4]q
[debug]
  address = %[5]q

[plugins."io.containerd.internal.v1.opt"]
  path = %[6]q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  # The sandbox lacks CAP_SYS_RESOURCE: runc's negative oom_score_adj fails without this.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = %[7]q
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[8]q
    conf_dir = %[9]q
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = %[10]q
`, filepath.Join(d, "containerd", "root"), filepath.Join(d, "containerd", "state"), c.sock(),
		filepath.Join(d, "containerd", "ttrpc.sock"), filepath.Join(d, "containerd", "debug.sock"),
		filepath.Join(d, "containerd", "opt"), filepath.Join(d, "runc"), cniBinDir, filepath.Join(d, "cni"),
		c.registryConfigDir())
	if err := os.WriteFile(filepath.Join(d, "containerd.toml"), []byte(containerd), 0o644); err != nil {
		return err
	}

	cni := map[string]any{
		"cniVersion": "0.4.0", "name": c.Bridge,
		"plugins": []any{
			map[string]any{
				"type": "bridge", "bridge": c.Bridge, "isGateway": true, "ipMasq": false,
				"ipam": map[string]any{
					"type": "host-local", "dataDir": filepath.Join(d, "cni-ipam"),
					"ranges": []any{[]any{map[string]any{"subnet": c.PodSubnet}}},
					"routes": []any{map[string]any{"dst": "0.0.0.0/0"}},
				},
			},
			// hostPort (no kube-proxy here): the agent's direct endpoint
			// is published on the node this way.
			map[string]any{"type": "portmap", "capabilities": map[string]any{"portMappings": true}, "snat": true},
		},
	}
	b, _ := json.MarshalIndent(cni, "", "  ")
	if err := os.WriteFile(filepath.Join(d, "cni", "10-fleet-dev.conflist"), b, 0o644); err != nil {
		return err
	}

	kubelet := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: %d
healthzBindAddress: 127.0.0.1
healthzPort: %d
readOnlyPort: 0
cgroupDriver: cgroupfs
cgroupRoot: %s
cgroupsPerQOS: true
failSwapOn: false
failCgroupV1: false
makeIPTablesUtilChains: false
containerRuntimeEndpoint: unix://%s
tlsCertFile: %s
tlsPrivateKeyFile: %s
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %s}
authorization:
  mode: Webhook
podLogsDir: %s
volumePluginDir: %s
resolvConf: /etc/resolv.conf
evictionHard:
  memory.available: 50Mi
  nodefs.available: 1%%
  nodefs.inodesFree: 1%%
  imagefs.available: 1%%
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
`, c.KubeletPort, c.HealthzPort, c.CgroupRoot, c.sock(), p.path("kubelet.crt"), p.path("kubelet.key"),
		p.path("ca.crt"), filepath.Join(d, "pod-logs"), filepath.Join(d, "kubelet", "volume-plugins"))
	return os.WriteFile(filepath.Join(d, "kubelet.yaml"), []byte(kubelet), 0o644)
}
