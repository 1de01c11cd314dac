package kubeconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// upstreamKubeconfig is a caller's kubeconfig with the shapes users have:
// token, client certificate files, exec plugins, an auth provider,
// impersonation, a server behind a path prefix.
const upstreamKubeconfig = `apiVersion: v1
kind: Config
current-context: admin@upstream
clusters:
- name: upstream
  cluster:
    server: https://fleet.example.com:6443
    certificate-authority-data: Q0EtREFUQQ==
- name: rancher
  cluster:
    server: https://rancher.example.com/k8s/clusters/local/
    certificate-authority: certs/ca.crt
    tls-server-name: api.internal
    proxy-url: http://proxy.internal:3128
- name: lab
  cluster:
    server: https://10.0.0.1:6443
    insecure-skip-tls-verify: true
    disable-compression: true
users:
- name: admin
  user:
    token: TOKEN-ADMIN
- name: certs
  user:
    client-certificate: certs/client.crt
    client-key: ABSDIR/certs/client.key
    tokenFile: certs/token
- name: sso
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: ./bin/get-token
      args: [--audience, fleet]
      env: [{name: LOGIN, value: corp}]
      interactiveMode: IfAvailable
- name: sso-path
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: kubelogin
      interactiveMode: Never
- name: oidc
  user:
    auth-provider:
      name: oidc
      config:
        client-id: fleet
        idp-issuer-url: https://login.example.com
- name: breakglass
  user:
    token: TOKEN-BG
    as: alice
    as-groups: [payments]
contexts:
- name: admin@upstream
  context: {cluster: upstream, user: admin, namespace: fleet-default}
- name: certs@rancher
  context: {cluster: rancher, user: certs}
- name: sso@lab
  context: {cluster: lab, user: sso}
- name: sso-path@upstream
  context: {cluster: upstream, user: sso-path}
- name: oidc@upstream
  context: {cluster: upstream, user: oidc}
- name: breakglass@upstream
  context: {cluster: upstream, user: breakglass}
- name: no-user
  context: {cluster: upstream, user: nobody}
- name: no-cluster
  context: {cluster: nowhere, user: admin}
- name: bad-server
  context: {cluster: unix, user: admin}
`

// loadUpstream writes the caller's kubeconfig and the files it names into
// a directory and loads it as clientcmd does (LocationOfOrigin set, paths
// as written).
func loadUpstream(t *testing.T) (*clientcmdapi.Config, string) {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"certs/ca.crt": "CA-FILE", "certs/client.crt": "CLIENT-CERT", "certs/client.key": "CLIENT-KEY", "certs/token": "TOKEN-FROM-FILE\n",
	}
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	kc := strings.ReplaceAll(upstreamKubeconfig, "ABSDIR", dir)
	kc = strings.Replace(kc, "- name: lab\n", "- name: unix\n  cluster:\n    server: unix:///var/run/k8s.sock\n- name: lab\n", 1)
	path := filepath.Join(dir, "config")
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, dir
}

// single is the kubeconfig ForCluster should return: one cluster, user and
// context, all named name.
func single(name string, cluster *clientcmdapi.Cluster, user *clientcmdapi.AuthInfo) *clientcmdapi.Config {
	return &clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{name: cluster},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{name: user},
		Contexts:       map[string]*clientcmdapi.Context{name: {Cluster: name, AuthInfo: name}},
		CurrentContext: name,
	}
}

func TestForCluster(t *testing.T) {
	devProxy := "https://fleet.example.com:6443/apis/proxy.fleet.cattle.io/v1alpha1/namespaces/fleet-default/clusters/dev-1/proxy"
	dev1 := ClusterRef{Workspace: "fleet-default", Name: "dev-1"}
	tests := []struct {
		name string
		opts Options
		ref  ClusterRef
		want func(dir string) *clientcmdapi.Config
	}{{
		name: "current context, token: server is the proxy URL, CA kept, namespace dropped",
		ref:  dev1,
		want: func(string) *clientcmdapi.Config {
			return single("dev-1",
				&clientcmdapi.Cluster{Server: devProxy, CertificateAuthorityData: []byte("CA-DATA")},
				&clientcmdapi.AuthInfo{Token: "TOKEN-ADMIN"})
		},
	}, {
		name: "server path prefix kept; TLS server name and proxy URL kept; relative files made absolute",
		opts: Options{Context: "certs@rancher"},
		ref:  ClusterRef{Workspace: "team-ws", Name: "edge.042"},
		want: func(dir string) *clientcmdapi.Config {
			return single("edge.042",
				&clientcmdapi.Cluster{
					Server:               "https://rancher.example.com/k8s/clusters/local/apis/proxy.fleet.cattle.io/v1alpha1/namespaces/team-ws/clusters/edge.042/proxy",
					CertificateAuthority: filepath.Join(dir, "certs/ca.crt"),
					TLSServerName:        "api.internal",
					ProxyURL:             "http://proxy.internal:3128",
				},
				&clientcmdapi.AuthInfo{
					ClientCertificate: filepath.Join(dir, "certs/client.crt"),
					ClientKey:         filepath.Join(dir, "certs/client.key"),
					TokenFile:         filepath.Join(dir, "certs/token"),
				})
		},
	}, {
		name: "insecure and compression settings kept; exec command given as a path made absolute",
		opts: Options{Context: "sso@lab", ContextName: "lab-dev-1"},
		ref:  dev1,
		want: func(dir string) *clientcmdapi.Config {
			return single("lab-dev-1",
				&clientcmdapi.Cluster{
					Server:                "https://10.0.0.1:6443/apis/proxy.fleet.cattle.io/v1alpha1/namespaces/fleet-default/clusters/dev-1/proxy",
					InsecureSkipTLSVerify: true,
					DisableCompression:    true,
				},
				&clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{
					APIVersion:      "client.authentication.k8s.io/v1",
					Command:         filepath.Join(dir, "bin/get-token"),
					Args:            []string{"--audience", "fleet"},
					Env:             []clientcmdapi.ExecEnvVar{{Name: "LOGIN", Value: "corp"}},
					InteractiveMode: clientcmdapi.IfAvailableExecInteractiveMode,
				}})
		},
	}, {
		name: "exec command from PATH stays as it is",
		opts: Options{Context: "sso-path@upstream"},
		ref:  dev1,
		want: func(string) *clientcmdapi.Config {
			return single("dev-1",
				&clientcmdapi.Cluster{Server: devProxy, CertificateAuthorityData: []byte("CA-DATA")},
				&clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{
					APIVersion: "client.authentication.k8s.io/v1", Command: "kubelogin", InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
				}})
		},
	}, {
		name: "auth provider copied",
		opts: Options{Context: "oidc@upstream"},
		ref:  dev1,
		want: func(string) *clientcmdapi.Config {
			return single("dev-1",
				&clientcmdapi.Cluster{Server: devProxy, CertificateAuthorityData: []byte("CA-DATA")},
				&clientcmdapi.AuthInfo{AuthProvider: &clientcmdapi.AuthProviderConfig{
					Name: "oidc", Config: map[string]string{"client-id": "fleet", "idp-issuer-url": "https://login.example.com"},
				}})
		},
	}, {
		name: "impersonation copied: it means upstream what it meant before",
		opts: Options{Context: "breakglass@upstream"},
		ref:  dev1,
		want: func(string) *clientcmdapi.Config {
			return single("dev-1",
				&clientcmdapi.Cluster{Server: devProxy, CertificateAuthorityData: []byte("CA-DATA")},
				&clientcmdapi.AuthInfo{Token: "TOKEN-BG", Impersonate: "alice", ImpersonateGroups: []string{"payments"}})
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			upstream, dir := loadUpstream(t)
			before := upstream.DeepCopy()
			got, err := ForCluster(upstream, tt.ref, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want(dir), got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("kubeconfig (-want +got):\n%s", diff)
			}
			if err := clientcmd.Validate(*got); err != nil {
				t.Errorf("not a valid kubeconfig: %v", err)
			}
			if diff := cmp.Diff(before, upstream); diff != "" {
				t.Errorf("the caller's kubeconfig was changed (-before +after):\n%s", diff)
			}
		})
	}
}

func TestForCluster_FlattenInlinesFiles(t *testing.T) {
	upstream, dir := loadUpstream(t)
	got, err := ForCluster(upstream, ClusterRef{Workspace: "team-ws", Name: "edge-042"}, Options{Context: "certs@rancher", Flatten: true})
	if err != nil {
		t.Fatal(err)
	}
	want := single("edge-042",
		&clientcmdapi.Cluster{
			Server:                   "https://rancher.example.com/k8s/clusters/local/apis/proxy.fleet.cattle.io/v1alpha1/namespaces/team-ws/clusters/edge-042/proxy",
			CertificateAuthorityData: []byte("CA-FILE"),
			TLSServerName:            "api.internal",
			ProxyURL:                 "http://proxy.internal:3128",
		},
		&clientcmdapi.AuthInfo{ClientCertificateData: []byte("CLIENT-CERT"), ClientKeyData: []byte("CLIENT-KEY"), Token: "TOKEN-FROM-FILE"})
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("kubeconfig (-want +got):\n%s", diff)
	}
	if strings.Contains(string(must(clientcmd.Write(*got))), dir) {
		t.Errorf("a flattened kubeconfig still names a file of %s", dir)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestForCluster_RefusesWhatCannotWork(t *testing.T) {
	dev1 := ClusterRef{Workspace: "fleet-default", Name: "dev-1"}
	tests := []struct {
		name    string
		edit    func(*clientcmdapi.Config)
		opts    Options
		wantErr string
	}{
		{"no current context", func(c *clientcmdapi.Config) { c.CurrentContext = "" }, Options{}, "no current context: give --context"},
		{"unknown context", nil, Options{Context: "prod"}, `no context "prod"`},
		{"context without its user", nil, Options{Context: "no-user"}, `context "no-user": the kubeconfig has no user "nobody"`},
		{"context without its cluster", nil, Options{Context: "no-cluster"}, `no cluster "nowhere"`},
		{"server not https", nil, Options{Context: "bad-server"}, `upstream server "unix:///var/run/k8s.sock": want an https:// URL`},
		{"relative file of unknown origin", func(c *clientcmdapi.Config) {
			c.AuthInfos["admin"].LocationOfOrigin, c.AuthInfos["admin"].TokenFile = "", "tok"
		},
			Options{}, `user "admin": file "tok" is relative`},
		{"flatten with a file missing", nil, Options{Context: "certs@rancher", Flatten: true}, "certs/client.key: no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			upstream, dir := loadUpstream(t)
			if err := os.Remove(filepath.Join(dir, "certs/client.key")); err != nil {
				t.Fatal(err)
			}
			if tt.edit != nil {
				tt.edit(upstream)
			}
			_, err := ForCluster(upstream, dev1, tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("want an error containing %q, got %v", tt.wantErr, err)
			}
		})
	}
}

func TestParseClusterRef(t *testing.T) {
	tests := []struct {
		in      string
		want    ClusterRef
		wantErr string
	}{
		{in: "fleet-default/dev-1", want: ClusterRef{Workspace: "fleet-default", Name: "dev-1"}},
		{in: "ws/edge.042", want: ClusterRef{Workspace: "ws", Name: "edge.042"}},
		{in: "dev-1", wantErr: "want <workspace>/<name>"},
		{in: "", wantErr: "want <workspace>/<name>"},
		{in: "/dev-1", wantErr: "want <workspace>/<name>"},
		{in: "fleet-default/", wantErr: "want <workspace>/<name>"},
		{in: "a/b/c", wantErr: "want <workspace>/<name>"},
		{in: "Fleet/dev-1", wantErr: `workspace "Fleet" is not a namespace name`},
		{in: "ws/dev_1", wantErr: `"dev_1" is not a Cluster name`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseClusterRef(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("want an error containing %q, got %v (%+v)", tt.wantErr, err, got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if got.String() != tt.in {
				t.Errorf("String() = %q, want %q", got.String(), tt.in)
			}
		})
	}
}

func TestWriteFile_ReplacesWithMode0600(t *testing.T) {
	p := filepath.Join(t.TempDir(), "dev-1")
	if err := os.WriteFile(p, []byte("old, world-readable"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(p, []byte("new")); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	if b, _ := os.ReadFile(p); string(b) != "new" {
		t.Errorf("content %q", b)
	}
	entries, _ := os.ReadDir(filepath.Dir(p))
	if len(entries) != 1 {
		t.Errorf("temporary files left: %v", entries)
	}
}

// TestCheckDirectServer_OnlyWhatKubectlDialsOverTLS: the direct context
// carries a bearer token, so its server must be dialled over https as
// client-go decides it, not as it is written.
func TestCheckDirectServer_OnlyWhatKubectlDialsOverTLS(t *testing.T) {
	for server, ok := range map[string]bool{
		"https://dev-1.example.com:6443": true,
		"https://[fd00::1]:8443":         true,
		"dev-1.example.com:8443":         false,
		"dev-1.example.com":              false,
		"10.0.0.5:8080":                  false,
		"HTTP://dev-1.example.com":       false,
		"http://dev-1.example.com":       false,
		"//dev-1.example.com":            false,
		"unix:///var/run/agent.sock":     false,
		"":                               false,
	} {
		err := CheckDirectServer(server)
		if ok && err != nil {
			t.Errorf("%q: %v", server, err)
		}
		if !ok && (err == nil || !strings.Contains(err.Error(), "spec.agentDirectEndpoint.url")) {
			t.Errorf("%q: %v, want a refusal naming spec.agentDirectEndpoint.url", server, err)
		}
	}
}
