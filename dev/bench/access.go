package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gitops-fleet/fleet/agent/access"
	proxyv1 "github.com/gitops-fleet/fleet/api/proxy/v1alpha1"
	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/controlplane"
	"github.com/gitops-fleet/fleet/dev/proxyenv"
	"github.com/gitops-fleet/fleet/internal/assertion"
	directapi "github.com/gitops-fleet/fleet/internal/direct"
	"github.com/gitops-fleet/fleet/internal/tunnel"
	"github.com/gitops-fleet/fleet/proxy"
)

// The access scenarios run on their own upstream and downstream: fleet-proxy
// (this binary's `fleet proxy`, a separate process so that its memory and
// CPU are its own) behind the upstream aggregator, registered as the chart
// does, and agents in this process (proxyenv). Nothing else runs: no
// controller, no kube-controller-manager.
const (
	accessNamespace = "fleet-system"
	accessWorkspace = "fleet-bench-access"
	// accessCluster is the Cluster of the overhead and concurrency
	// scenarios; its agent serves the access handler.
	accessCluster = "bench-a"
	// The downstream namespace and ConfigMap the users read.
	probeNamespace = "bench-access"
	probeName      = "probe"
	// The upstream user: fleet:<it> downstream.
	userNamespace, userName = "bench-users", "alice"
)

type accessEnv struct {
	env *controlplane.Env
	// ownsEnv: stop stops env too (the access group's own control planes,
	// not the registration group's it borrowed).
	ownsEnv  bool
	dir      string
	fleetBin string
	// fleet-proxy's listener (a non-loopback host: the aggregator reaches
	// it through an EndpointSlice) and metrics endpoint.
	addr, metricsAddr string
	// fleet-proxy's endpoint (bearer tokens, no aggregator), on the
	// serving certificate.
	endpointAddr      string
	kubeconfig        string
	certFile, keyFile string
	certPEM           []byte
	proxy             *exec.Cmd
	proxyExited       chan struct{}
	proxyLog          string
}

func startAccessEnv(ctx context.Context, fleetBin string) (*accessEnv, error) {
	env, err := controlplane.Start(ctx, controlplane.Options{Downstreams: 1, NoControllerManager: true,
		// A thousand tunnels are long-running requests; the rest leaves
		// the concurrency scenario room.
		APIServerFlags: []string{"max-requests-inflight=2000", "max-mutating-requests-inflight=1000"}})
	if err != nil {
		return nil, err
	}
	return newAccessEnv(ctx, env, fleetBin, true)
}

// newAccessEnv registers and starts fleet-proxy on env's upstream; owns
// says whether stop stops env too.
func newAccessEnv(ctx context.Context, env *controlplane.Env, fleetBin string, owns bool) (*accessEnv, error) {
	ae := &accessEnv{env: env, ownsEnv: owns, fleetBin: fleetBin}
	if err := ae.init(ctx); err != nil {
		ae.stop()
		return nil, err
	}
	return ae, nil
}

func (ae *accessEnv) init(ctx context.Context) error {
	var err error
	if ae.dir, err = os.MkdirTemp("", "fleet-bench-access-"); err != nil {
		return err
	}
	up := ae.env.Upstream
	for _, ns := range []string{accessNamespace, accessWorkspace, userNamespace} {
		if err := up.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	host, err := controlplane.AggregatedServerHost()
	if err != nil {
		return err
	}
	if ae.addr, err = freeAddressOn(host); err != nil {
		return err
	}
	if ae.metricsAddr, err = freeAddress(); err != nil {
		return err
	}
	if ae.endpointAddr, err = freeAddressOn(host); err != nil {
		return err
	}
	var keyPEM []byte
	if ae.certPEM, keyPEM, err = proxyenv.ServingCert(accessNamespace, host); err != nil {
		return err
	}
	ae.certFile, ae.keyFile = filepath.Join(ae.dir, "tls.crt"), filepath.Join(ae.dir, "tls.key")
	ae.kubeconfig = filepath.Join(ae.dir, "upstream.kubeconfig")
	for file, b := range map[string][]byte{ae.certFile: ae.certPEM, ae.keyFile: keyPEM, ae.kubeconfig: up.Kubeconfig} {
		if err := os.WriteFile(file, b, 0o600); err != nil {
			return err
		}
	}
	// What the chart makes for the endpoint, before fleet-proxy writes
	// its CA there.
	if err := proxyenv.RegisterEndpoint(ctx, up.Client, "https://"+ae.endpointAddr); err != nil {
		return err
	}
	if err := ae.startProxy(ctx); err != nil {
		return err
	}
	_, port, _ := net.SplitHostPort(ae.addr)
	p, _ := strconv.Atoi(port)
	return proxyenv.Register(ctx, up.Client, up.Clientset, accessNamespace, host, p, ae.certPEM)
}

// startProxy runs `fleet proxy` as cmd/fleet/proxy.go documents it, with
// the upstream admin's kubeconfig and one replica (no peering). It
// returns once the process listens; the aggregator may need longer.
func (ae *accessEnv) startProxy(ctx context.Context) error {
	ae.proxyLog = filepath.Join(ae.dir, fmt.Sprintf("proxy-%d.log", time.Now().UnixNano()))
	logf, err := os.Create(ae.proxyLog)
	if err != nil {
		return err
	}
	cmd := exec.Command(ae.fleetBin, "proxy", "--kubeconfig", ae.kubeconfig, "--namespace", accessNamespace,
		"--listen", ae.addr, "--tls-cert-file", ae.certFile, "--tls-private-key-file", ae.keyFile,
		"--metrics-address", ae.metricsAddr, "--replica-name", "fleet-proxy-bench", "--pod-ip", "",
		"--endpoint-listen", ae.endpointAddr, "--tls-ca-file", ae.certFile)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("starting fleet-proxy (%s): %w", ae.fleetBin, err)
	}
	ae.proxy, ae.proxyExited = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(ae.proxyExited) }()
	deadline := time.Now().Add(time.Minute)
	for {
		if c, err := net.DialTimeout("tcp", ae.addr, time.Second); err == nil {
			c.Close()
			return nil
		}
		select {
		case <-ae.proxyExited:
			return fmt.Errorf("fleet-proxy exited at start (log: %s)", ae.proxyLog)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("fleet-proxy does not listen on %s after a minute (log: %s)", ae.addr, ae.proxyLog)
		}
	}
}

func (ae *accessEnv) stopProxy() {
	if ae.proxy == nil {
		return
	}
	_ = ae.proxy.Process.Signal(os.Interrupt)
	select {
	case <-ae.proxyExited:
	case <-time.After(10 * time.Second):
		_ = ae.proxy.Process.Kill()
		<-ae.proxyExited
	}
	ae.proxy = nil
}

// restartProxy starts a fresh fleet-proxy on the same address (the
// registration stays) and waits until the upstream reaches it.
func (ae *accessEnv) restartProxy(ctx context.Context) error {
	ae.stopProxy()
	if err := ae.startProxy(ctx); err != nil {
		return err
	}
	return ae.waitServed(ctx)
}

// waitServed waits for the proxy API's discovery, which fleet-proxy
// answers itself, through the upstream.
func (ae *accessEnv) waitServed(ctx context.Context) error {
	rc := ae.env.Upstream.Clientset.Discovery().RESTClient()
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := rc.Get().AbsPath("/apis/" + proxy.GroupVersion).DoRaw(ctx)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the upstream does not reach fleet-proxy: %w (log: %s)", err, ae.proxyLog)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (ae *accessEnv) stop() {
	ae.stopProxy()
	if ae.env != nil && ae.ownsEnv {
		_ = ae.env.Stop()
	}
	if ae.dir != "" {
		_ = os.RemoveAll(ae.dir)
	}
}

// proxyUsage is fleet-proxy's current RSS (MB) and CPU seconds so far.
func (ae *accessEnv) proxyUsage() (rssMB, cpuS float64) {
	if ae.proxy == nil {
		return 0, 0
	}
	_, cpuS = processUsage(ae.proxy.Process.Pid)
	rssMB, _ = processRSS(ae.proxy.Process.Pid)
	return rssMB, cpuS
}

// proxyAnonMB is the anonymous part of fleet-proxy's RSS.
func (ae *accessEnv) proxyAnonMB() float64 {
	if ae.proxy == nil {
		return 0
	}
	_, anon := processRSS(ae.proxy.Process.Pid)
	return anon
}

// proxyTunnels reads fleet-proxy's fleet_proxy_tunnels gauge.
func (ae *accessEnv) proxyTunnels(ctx context.Context) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+ae.metricsAddr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "fleet_proxy_tunnels "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return int(v), err
		}
	}
	return 0, errors.New("no fleet_proxy_tunnels in fleet-proxy's metrics")
}

// settle waits until fleet-proxy uses less than a tenth of a core over a
// second (its writes after connects are done), at most limit.
func (ae *accessEnv) settle(ctx context.Context, limit time.Duration) {
	deadline := time.Now().Add(limit)
	_, last := ae.proxyUsage()
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		_, now := ae.proxyUsage()
		if now-last < 0.1 {
			return
		}
		last = now
	}
}

// agentToken makes what a grant leaves for Cluster cluster's agent and
// returns a token of its request identity.
func (ae *accessEnv) agentToken(ctx context.Context, cluster string) (string, error) {
	up := ae.env.Upstream
	sa, err := proxyenv.AgentIdentity(ctx, up.Client, accessWorkspace, cluster, "reg-"+cluster, cluster)
	if err != nil {
		return "", err
	}
	return up.ServiceAccountToken(ctx, sa.Namespace, sa.Name, 2*time.Hour)
}

// probe is what the overhead and concurrency scenarios read: the same
// ConfigMap directly downstream and through fleet-proxy, with equal rights
// (get, list, watch ConfigMaps of one namespace) for a downstream
// ServiceAccount and for fleet:<the upstream user>.
type probe struct {
	directURL, proxyURL string
	// hopURL is fleet-proxy's discovery document through the upstream:
	// the upstream API server's and aggregator's share of the proxy path.
	hopURL                  string
	directToken, userToken  string
	downCA, upCA            []byte
	directWatch, proxyWatch string
	stopAgent               func()
	// The agent's direct endpoint (authorized cluster endpoint): its URL
	// for the same GET, its CA, and the user's direct token.
	endpointURL, endpointToken string
	endpointCA                 []byte
	// The same GET through fleet-proxy's endpoint, as the user, with the
	// serving certificate's CA.
	proxyEndpointURL string
	proxyEndpointCA  []byte
}

func (ae *accessEnv) setupProbe(ctx context.Context) (*probe, error) {
	up, down := ae.env.Upstream, ae.env.Downstreams[0]
	agentTok, err := ae.agentToken(ctx, accessCluster)
	if err != nil {
		return nil, err
	}
	// The user: an upstream ServiceAccount with clusters/proxy on the Cluster.
	if err := up.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: userNamespace, Name: userName}}); err != nil {
		return nil, err
	}
	userTok, err := up.ServiceAccountToken(ctx, userNamespace, userName, 2*time.Hour)
	if err != nil {
		return nil, err
	}
	user := "system:serviceaccount:" + userNamespace + ":" + userName
	if err := createAll(ctx, up.Client.Create,
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: accessWorkspace, Name: "bench-proxy"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{"fleet.cattle.io"}, Resources: []string{"clusters/proxy"},
				ResourceNames: []string{accessCluster}, Verbs: []string{"get", "create", "update", "patch", "delete"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: accessWorkspace, Name: "bench-proxy"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "bench-proxy"},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}}},
	); err != nil {
		return nil, err
	}
	// Downstream: the ConfigMaps and the equal rights.
	if err := createAll(ctx, down.Client.Create,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: probeNamespace}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: probeNamespace, Name: "direct"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: probeNamespace, Name: probeName}, Data: map[string]string{"k": "v"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: probeNamespace, Name: probeName + "-watch"}, Data: map[string]string{"seq": "0"}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: probeNamespace, Name: "configmap-reader"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: probeNamespace, Name: "configmap-reader"},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "configmap-reader"},
			Subjects: []rbacv1.Subject{
				{APIGroup: rbacv1.GroupName, Kind: "User", Name: "fleet:" + user},
				{Kind: "ServiceAccount", Namespace: probeNamespace, Name: "direct"},
			}},
	); err != nil {
		return nil, err
	}
	directTok, err := down.ServiceAccountToken(ctx, probeNamespace, "direct", 2*time.Hour)
	if err != nil {
		return nil, err
	}

	// The agent: its tunnel and access handler, as agent.serveAccess runs them.
	a, err := proxyenv.NewAgent(ctx, proxyenv.AgentOptions{Upstream: up.Config, Token: agentTok,
		Workspace: accessWorkspace, Cluster: accessCluster, Local: down.Config})
	if err != nil {
		return nil, err
	}
	actx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = a.Tunnel.Run(actx) }()
	go func() { defer wg.Done(); _ = a.Handler.Run(actx) }()
	var once sync.Once
	p := &probe{directToken: directTok, userToken: userTok, downCA: down.Config.CAData, upCA: up.Config.CAData,
		stopAgent: func() { once.Do(func() { cancel(); wg.Wait() }) }}
	if err := waitFor(ctx, time.Minute, "the agent's tunnel", func() bool { return a.Tunnel.Connected() }); err != nil {
		p.stopAgent()
		return nil, err
	}
	path := "/api/v1/namespaces/" + probeNamespace + "/configmaps"
	proxyBase := strings.TrimSuffix(up.Config.Host, "/") + "/apis/" + proxy.GroupVersion + "/namespaces/" + accessWorkspace +
		"/clusters/" + accessCluster + "/proxy"
	downBase := strings.TrimSuffix(down.Config.Host, "/")
	p.directURL, p.proxyURL = downBase+path+"/"+probeName, proxyBase+path+"/"+probeName
	p.hopURL = strings.TrimSuffix(up.Config.Host, "/") + "/apis/" + proxy.GroupVersion
	p.proxyEndpointURL = "https://" + ae.endpointAddr + "/apis/" + proxy.GroupVersion + "/namespaces/" + accessWorkspace +
		"/clusters/" + accessCluster + "/proxy" + path + "/" + probeName
	p.proxyEndpointCA = ae.certPEM
	watch := path + "?watch=1&fieldSelector=metadata.name%3D" + probeName + "-watch"
	p.directWatch, p.proxyWatch = downBase+watch, proxyBase+watch

	// The direct endpoint as agent.serveDirect runs it (the access handler
	// in direct mode over TLS), and a direct token fleet-proxy issues the
	// user through the upstream API server.
	dh, err := access.New(access.Options{Audience: accessWorkspace + "/" + accessCluster, Verifier: assertion.NewVerifier(a.Handler.Keys()),
		Local: rest.CopyConfig(down.Config), Direct: true})
	if err != nil {
		p.stopAgent()
		return nil, err
	}
	srv := httptest.NewTLSServer(dh.ServeDirect(access.NewRevocations()))
	stop := p.stopAgent
	p.stopAgent = func() { srv.Close(); stop() }
	p.endpointCA = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	cl := &fleet.Cluster{}
	if err := up.Client.Get(ctx, client.ObjectKey{Namespace: accessWorkspace, Name: accessCluster}, cl); err != nil {
		p.stopAgent()
		return nil, err
	}
	// Merge patches: fleet-proxy writes the Cluster's Connected condition
	// meanwhile (the agent's tunnel is up).
	base := cl.DeepCopy()
	cl.Spec.AgentDirectEndpoint = &fleet.DirectEndpointSpec{URL: srv.URL}
	if err := up.Client.Patch(ctx, cl, client.MergeFrom(base)); err != nil {
		p.stopAgent()
		return nil, err
	}
	base = cl.DeepCopy()
	cl.Status.Agent.DirectEndpointCA = string(p.endpointCA)
	if err := up.Client.Status().Patch(ctx, cl, client.MergeFrom(base)); err != nil {
		p.stopAgent()
		return nil, err
	}
	var tok *proxyv1.DirectToken
	var tokErr error
	if err := waitFor(ctx, 30*time.Second, "a direct token from fleet-proxy", func() bool {
		tok, tokErr = directapi.RequestToken(ctx, up.ConfigForToken(userTok), accessWorkspace, accessCluster, time.Hour)
		return tokErr == nil
	}); err != nil {
		p.stopAgent()
		return nil, fmt.Errorf("%w (last answer: %v)", err, tokErr)
	}
	p.endpointURL, p.endpointToken = srv.URL+path+"/"+probeName, tok.Status.Token
	return p, nil
}

func createAll(ctx context.Context, create func(context.Context, client.Object, ...client.CreateOption) error, objs ...client.Object) error {
	for _, o := range objs {
		if err := create(ctx, o); err != nil {
			return fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}
	return nil
}

func waitFor(ctx context.Context, limit time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("waiting %s for %s", limit, what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// httpClient has its own transport, hence its own connection.
func httpClient(ca []byte) *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 1,
	}}
}

// get does one GET and returns its latency; anything but 200 is an error.
func get(ctx context.Context, c *http.Client, url, token string) (time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "application/json")
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %d %s", url, resp.StatusCode, bytes.TrimSpace(body))
	}
	return took, nil
}

// proxyOverhead measures the same GET, and a watch event, directly
// downstream and through fleet-proxy.
func (ae *accessEnv) proxyOverhead(ctx context.Context, p *probe, n, watchN int) ([]Result, error) {
	direct, viaProxy := httpClient(p.downCA), httpClient(p.upCA)
	// Warm up: connections, the impersonator and its token downstream,
	// fleet-proxy's authorization cache.
	if err := waitFor(ctx, 30*time.Second, "a first GET through fleet-proxy", func() bool {
		_, err := get(ctx, viaProxy, p.proxyURL, p.userToken)
		return err == nil
	}); err != nil {
		return nil, err
	}
	endpoint, proxyEndpoint := httpClient(p.endpointCA), httpClient(p.proxyEndpointCA)
	for range 20 {
		if _, err := get(ctx, direct, p.directURL, p.directToken); err != nil {
			return nil, err
		}
		if _, err := get(ctx, proxyEndpoint, p.proxyEndpointURL, p.userToken); err != nil {
			return nil, err
		}
		if _, err := get(ctx, endpoint, p.endpointURL, p.endpointToken); err != nil {
			return nil, err
		}
		if _, err := get(ctx, viaProxy, p.proxyURL, p.userToken); err != nil {
			return nil, err
		}
	}
	// Alternate, so that whatever else the machine does weighs on all.
	var ds, ps, hs, es, pes []time.Duration
	for range n {
		d, err := get(ctx, direct, p.directURL, p.directToken)
		if err != nil {
			return nil, err
		}
		ed, err := get(ctx, endpoint, p.endpointURL, p.endpointToken)
		if err != nil {
			return nil, err
		}
		es = append(es, ed)
		pd, err := get(ctx, viaProxy, p.proxyURL, p.userToken)
		if err != nil {
			return nil, err
		}
		hd, err := get(ctx, viaProxy, p.hopURL, p.userToken)
		if err != nil {
			return nil, err
		}
		ds, ps, hs = append(ds, d), append(ps, pd), append(hs, hd)
	}
	// fleet-proxy's endpoint in a loop of its own, alternating with the
	// direct GET as the loop above does.
	for range n {
		if _, err := get(ctx, direct, p.directURL, p.directToken); err != nil {
			return nil, err
		}
		ped, err := get(ctx, proxyEndpoint, p.proxyEndpointURL, p.userToken)
		if err != nil {
			return nil, err
		}
		pes = append(pes, ped)
	}
	hop := Result{}
	hop.latencies(hs)
	getDirect := Result{Name: "access-get-direct", Count: n,
		Notes: "GET of a ConfigMap straight from the downstream API server, as a ServiceAccount with the user's downstream rights"}
	getDirect.latencies(ds)
	getProxy := Result{Name: "access-get-proxy", Count: n, Goal: "≤ 2 ms added at p50"}
	getProxy.latencies(ps)
	getProxy.Notes = fmt.Sprintf("the same GET as an upstream user through upstream API server → fleet-proxy → tunnel → access handler → downstream: "+
		"added p50 %.2f ms, p95 %.2f ms; for scale, fleet-proxy's discovery document through the upstream API server "+
		"(the upstream and aggregator hop alone, same user) takes p50 %.2f ms, p95 %.2f ms",
		*getProxy.P50Ms-*getDirect.P50Ms, *getProxy.P95Ms-*getDirect.P95Ms, *hop.P50Ms, *hop.P95Ms)

	getProxyEndpoint := Result{Name: "access-get-proxy-endpoint", Count: n, Goal: "≤ 2 ms added at p50"}
	getProxyEndpoint.latencies(pes)
	getProxyEndpoint.Notes = fmt.Sprintf("the same GET as the same upstream user and token through fleet-proxy's endpoint (its own listener: "+
		"TokenReview and SubjectAccessReview cached 10 s, no upstream API server or aggregator hop) → tunnel → access handler → downstream: "+
		"added p50 %.2f ms, p95 %.2f ms",
		*getProxyEndpoint.P50Ms-*getDirect.P50Ms, *getProxyEndpoint.P95Ms-*getDirect.P95Ms)

	getEndpoint := Result{Name: "access-get-endpoint", Count: n}
	getEndpoint.latencies(es)
	getEndpoint.Notes = fmt.Sprintf("the same GET as the same user with a direct token, to the agent's direct endpoint (authorized cluster endpoint: "+
		"token verified offline, the same impersonator): added p50 %.2f ms, p95 %.2f ms over the API server itself; through the manager adds p50 %.2f ms",
		*getEndpoint.P50Ms-*getDirect.P50Ms, *getEndpoint.P95Ms-*getDirect.P95Ms, *getProxy.P50Ms-*getDirect.P50Ms)

	wd, wp, err := ae.watchLatency(ctx, p, watchN)
	if err != nil {
		return nil, fmt.Errorf("watch: %w", err)
	}
	watchDirect := Result{Name: "access-watch-direct", Count: watchN,
		Notes: "from the start of a ConfigMap update downstream to its event on a watch straight to the downstream API server"}
	watchDirect.latencies(wd)
	watchProxy := Result{Name: "access-watch-proxy", Count: watchN, Goal: "≤ 2 ms added at p50"}
	watchProxy.latencies(wp)
	watchProxy.Notes = fmt.Sprintf("the same event on a watch through fleet-proxy, open at the same time: added p50 %.2f ms, p95 %.2f ms",
		*watchProxy.P50Ms-*watchDirect.P50Ms, *watchProxy.P95Ms-*watchDirect.P95Ms)
	return []Result{getDirect, getProxy, getProxyEndpoint, getEndpoint, watchDirect, watchProxy}, nil
}

// watchLatency opens a watch on the probe's watch ConfigMap directly and
// one through fleet-proxy, then updates it n times and times each event's
// arrival on both from the start of the update.
func (ae *accessEnv) watchLatency(ctx context.Context, p *probe, n int) (direct, viaProxy []time.Duration, err error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	dch, err := openWatch(wctx, httpClient(p.downCA), p.directWatch, p.directToken)
	if err != nil {
		return nil, nil, err
	}
	pch, err := openWatch(wctx, httpClient(p.upCA), p.proxyWatch, p.userToken)
	if err != nil {
		return nil, nil, err
	}
	cms := ae.env.Downstreams[0].Clientset.CoreV1().ConfigMaps(probeNamespace)
	// await returns when the event of seq arrived (earlier ones, such as
	// the initial ADDED, are skipped).
	await := func(ch <-chan watchEvent, seq string) (time.Time, error) {
		timeout := time.After(30 * time.Second)
		for {
			select {
			case e, ok := <-ch:
				if !ok {
					return time.Time{}, errors.New("the watch ended")
				}
				if e.seq == seq {
					return e.at, nil
				}
			case <-timeout:
				return time.Time{}, fmt.Errorf("no event for update %s within 30 s", seq)
			}
		}
	}
	for i := 1; i <= n+3; i++ {
		seq := strconv.Itoa(i)
		cm, err := cms.Get(ctx, probeName+"-watch", metav1.GetOptions{})
		if err != nil {
			return nil, nil, err
		}
		cm.Data["seq"] = seq
		start := time.Now()
		if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			return nil, nil, err
		}
		dAt, err := await(dch, seq)
		if err != nil {
			return nil, nil, fmt.Errorf("direct watch: %w", err)
		}
		pAt, err := await(pch, seq)
		if err != nil {
			return nil, nil, fmt.Errorf("watch through fleet-proxy: %w", err)
		}
		if i > 3 { // the first events warm both paths up
			direct, viaProxy = append(direct, dAt.Sub(start)), append(viaProxy, pAt.Sub(start))
		}
		time.Sleep(10 * time.Millisecond)
	}
	return direct, viaProxy, nil
}

type watchEvent struct {
	seq string
	at  time.Time
}

// openWatch streams a watch's events (with the seq the update wrote) and
// when each arrived; the channel closes when the watch ends.
func openWatch(ctx context.Context, c *http.Client, url, token string) (<-chan watchEvent, error) {
	c.Timeout = 0 // a watch stays open
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return nil, fmt.Errorf("watch %s: %d %s", url, resp.StatusCode, bytes.TrimSpace(b))
	}
	ch := make(chan watchEvent, 16)
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		dec := json.NewDecoder(resp.Body)
		for {
			var e struct {
				Object struct {
					Data map[string]string `json:"data"`
				} `json:"object"`
			}
			if err := dec.Decode(&e); err != nil {
				return
			}
			select {
			case ch <- watchEvent{seq: e.Object.Data["seq"], at: time.Now()}:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch, nil
}

// proxyConcurrency runs clients concurrent GET loops for window, each
// client on its own connection: directly to the downstream API server (the
// baseline), through the upstream API server and fleet-proxy over the one
// tunnel, and through fleet-proxy's endpoint over the same tunnel.
func (ae *accessEnv) proxyConcurrency(ctx context.Context, p *probe, clients int, window time.Duration) ([]Result, error) {
	direct, err := ae.concurrentGets(ctx, "access-concurrency-direct", p.downCA, p.directURL, p.directToken, clients, window)
	if err != nil {
		return nil, err
	}
	direct.Notes = fmt.Sprintf("%d clients, each on its own connection, GET loops directly to the downstream API server for %s; ", clients, window) + direct.Notes
	results := []Result{direct}
	for _, path := range []struct{ name, ca, url, how string }{
		{"access-concurrency", string(p.upCA), p.proxyURL, "through the upstream API server and fleet-proxy"},
		{"access-concurrency-endpoint", string(p.proxyEndpointCA), p.proxyEndpointURL, "through fleet-proxy's endpoint"},
	} {
		r, err := ae.concurrentGets(ctx, path.name, []byte(path.ca), path.url, p.userToken, clients, window)
		if err != nil {
			return results, err
		}
		ratio := 0.0
		if direct.ThroughputPerS != nil && *direct.ThroughputPerS > 0 {
			ratio = *r.ThroughputPerS / *direct.ThroughputPerS
		}
		r.Goal = "throughput >= half of direct"
		r.Notes = fmt.Sprintf("%d clients, each on its own connection, GET loops %s over ONE tunnel for %s: %.2f of the direct throughput; ",
			clients, path.how, window, ratio) + r.Notes
		results = append(results, r)
	}
	return results, nil
}

// concurrentGets runs clients GET loops on url for window and returns
// their latencies, throughput and fleet-proxy's CPU meanwhile.
func (ae *accessEnv) concurrentGets(ctx context.Context, name string, ca []byte, url, token string, clients int, window time.Duration) (Result, error) {
	cs := make([]*http.Client, clients)
	for i := range cs {
		cs[i] = httpClient(ca)
	}
	// Every client's connection is up before the window starts.
	var wg sync.WaitGroup
	warm := make([]error, clients)
	for i, c := range cs {
		wg.Add(1)
		go func() { defer wg.Done(); _, warm[i] = get(ctx, c, url, token) }()
	}
	wg.Wait()
	if err := errors.Join(warm...); err != nil {
		return Result{}, fmt.Errorf("%s: warming up the clients: %w", name, err)
	}
	_, cpu0 := ae.proxyUsage()
	var errs atomic.Int64
	var firstErr atomic.Value
	samples := make([][]time.Duration, clients)
	start := time.Now()
	end := start.Add(window)
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				d, err := get(ctx, c, url, token)
				if err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				samples[i] = append(samples[i], d)
			}
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	rss, cpu1 := ae.proxyUsage()
	for _, c := range cs {
		c.CloseIdleConnections()
	}
	var all []time.Duration
	for _, s := range samples {
		all = append(all, s...)
	}
	r := Result{Name: name, Count: len(all), WallS: f(wall.Seconds()),
		ThroughputPerS: f(float64(len(all)) / wall.Seconds()),
		ProxyRSSMB:     f(rss), ProxyCPUPct: f((cpu1 - cpu0) / wall.Seconds() * 100)}
	r.latencies(all)
	r.Notes = fmt.Sprintf("%d errors", errs.Load())
	if e := firstErr.Load(); e != nil {
		r.Notes += fmt.Sprintf(" (first: %s)", e)
	}
	return r, nil
}

// tunnelsIdle holds n idle tunnels, each of its own Cluster and agent
// identity, to a fresh fleet-proxy, and reads its memory and CPU.
func (ae *accessEnv) tunnelsIdle(ctx context.Context, n int, atRest time.Duration, progress func(string, ...any)) (Result, error) {
	// A fresh process: the other scenarios' buffers are not in its RSS.
	if err := ae.restartProxy(ctx); err != nil {
		return Result{}, err
	}
	ae.settle(ctx, 30*time.Second)
	rssFresh, _ := ae.proxyUsage()

	// The identities, 20 at a time; fleet-proxy caches them.
	tokens := make([]string, n)
	errs := make([]error, n)
	sem := make(chan struct{}, 20)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			tokens[i], errs[i] = ae.agentToken(ctx, idleCluster(i))
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return Result{}, fmt.Errorf("agent identities: %w", err)
	}
	ae.settle(ctx, 30*time.Second)
	rssIdentities, _ := ae.proxyUsage()
	anonIdentities := ae.proxyAnonMB()

	up := ae.env.Upstream
	tctx, cancel := context.WithCancel(context.Background())
	var runs sync.WaitGroup
	defer func() { cancel(); runs.Wait() }()
	clients := make([]*tunnel.Client, n)
	for i := range n {
		c, err := proxyenv.TunnelClient(&rest.Config{Host: up.Config.Host, BearerToken: tokens[i],
			TLSClientConfig: rest.TLSClientConfig{CAData: up.Config.CAData}}, accessWorkspace, idleCluster(i), http.NotFoundHandler())
		if err != nil {
			return Result{}, err
		}
		clients[i] = c
	}
	// In batches, as agents would not all come at once either; the
	// wall time is the connect rate this machine allows.
	start := time.Now()
	const batch = 50
	for lo := 0; lo < n; lo += batch {
		hi := min(n, lo+batch)
		for _, c := range clients[lo:hi] {
			runs.Add(1)
			go func() { defer runs.Done(); _ = c.Run(tctx) }()
		}
		if err := waitFor(ctx, 2*time.Minute, fmt.Sprintf("tunnels %d-%d", lo, hi-1), func() bool {
			for _, c := range clients[lo:hi] {
				if !c.Connected() {
					return false
				}
			}
			return true
		}); err != nil {
			return Result{}, err
		}
	}
	connectWall := time.Since(start)
	var held int
	if err := waitFor(ctx, time.Minute, fmt.Sprintf("fleet-proxy holding %d tunnels", n), func() bool {
		held, _ = ae.proxyTunnels(ctx)
		return held == n
	}); err != nil {
		return Result{}, fmt.Errorf("%w (it holds %d)", err, held)
	}
	progress("tunnels-idle: %d tunnels up in %s; settling, then %s at rest", n, connectWall.Round(time.Millisecond), atRest)
	// Connected conditions and events are written after each connect.
	ae.settle(ctx, time.Minute)
	rssTunnels, cpu0 := ae.proxyUsage()
	anonTunnels := ae.proxyAnonMB()
	select {
	case <-ctx.Done():
		return Result{}, ctx.Err()
	case <-time.After(atRest):
	}
	rssEnd, cpu1 := ae.proxyUsage()
	anonEnd := ae.proxyAnonMB()
	held, _ = ae.proxyTunnels(ctx)
	reconnects := 0
	for _, c := range clients {
		reconnects += c.Connections() - 1
	}
	perTunnelKB := (rssTunnels - rssIdentities) * 1024 / float64(n)
	r := Result{Name: "tunnels-idle", Count: n, WallS: f(connectWall.Seconds()),
		ProxyRSSMB: f(rssEnd), ProxyCPUPct: f((cpu1 - cpu0) / atRest.Seconds() * 100),
		ProxyRSSPerTunnelKB: f(perTunnelKB),
		Goal:                "< 300 MB at 1,000 tunnels, near-zero CPU at rest"}
	r.Notes = fmt.Sprintf("fleet-proxy as its own process; RSS fresh %.1f MB, with %d Clusters' identities cached %.1f MB (%.1f KB each), "+
		"with the tunnels %.1f MB (%.1f KB per tunnel; anonymous alone %.1f KB, the rest file-backed pages), "+
		"after %s at rest %.1f MB (%.1f MB anonymous, the rest the binary's pages); "+
		"CPU %% is over those %s; wall is connecting the tunnels %d at a time; %d tunnels held at the end, %d reconnects",
		rssFresh, n, rssIdentities, (rssIdentities-rssFresh)*1024/float64(n), rssTunnels, perTunnelKB, (anonTunnels-anonIdentities)*1024/float64(n), atRest, rssEnd, anonEnd,
		atRest, batch, held, reconnects)
	return r, nil
}

func idleCluster(i int) string { return fmt.Sprintf("idle-%04d", i) }

// freeAddressOn returns host with a free port.
func freeAddressOn(host string) (string, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// accessSizes are the scenarios' sizes, full or quick.
type accessSizes struct {
	gets, watches, clients, idleTunnels int
	window, rest                        time.Duration
}

func runAccess(ctx context.Context, opts Options, step func(string, ...any)) ([]Result, error) {
	sz := accessSizes{gets: 500, watches: 200, clients: 200, idleTunnels: 1000, window: 20 * time.Second, rest: 60 * time.Second}
	if opts.Quick {
		sz = accessSizes{gets: 100, watches: 30, clients: 50, idleTunnels: 100, window: 5 * time.Second, rest: 10 * time.Second}
	}
	if opts.Tunnels > 0 {
		sz.idleTunnels = opts.Tunnels
	}
	step("access: starting an upstream and a downstream control plane, fleet-proxy as a separate process")
	ae, err := startAccessEnv(ctx, opts.FleetBinary)
	if err != nil {
		return nil, fmt.Errorf("access: %w", err)
	}
	defer ae.stop()
	p, err := ae.setupProbe(ctx)
	if err != nil {
		return nil, fmt.Errorf("access: %w (fleet-proxy log: %s)", err, ae.proxyLog)
	}
	defer p.stopAgent()
	var results []Result

	step("proxy-overhead: %d GETs and %d watch events, direct and through fleet-proxy", sz.gets, sz.watches)
	rs, err := ae.proxyOverhead(ctx, p, sz.gets, sz.watches)
	results = append(results, rs...)
	if err != nil {
		return results, fmt.Errorf("proxy-overhead: %w (fleet-proxy log: %s)", err, ae.proxyLog)
	}

	step("proxy-concurrency: %d clients directly, then through one tunnel (both paths), %s each", sz.clients, sz.window)
	rs, err = ae.proxyConcurrency(ctx, p, sz.clients, sz.window)
	results = append(results, rs...)
	if err != nil {
		return results, fmt.Errorf("proxy-concurrency: %w (fleet-proxy log: %s)", err, ae.proxyLog)
	}
	p.stopAgent()

	step("tunnels-idle: %d idle tunnels to a fresh fleet-proxy, %s at rest", sz.idleTunnels, sz.rest)
	r, err := ae.tunnelsIdle(ctx, sz.idleTunnels, sz.rest, step)
	if err != nil {
		return results, fmt.Errorf("tunnels-idle: %w (fleet-proxy log: %s)", err, ae.proxyLog)
	}
	return append(results, r), nil
}
