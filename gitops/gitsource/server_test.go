package gitsource

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fluxcd/pkg/gittestserver"
	gossh "golang.org/x/crypto/ssh"
)

// The tests run a real git server: fluxcd's gittestserver (gitkit), which serves the
// repositories with the real git binaries (git upload-pack) over HTTP(S), with basic auth, and
// over SSH. Commits are made with the real git CLI.

const repoName = "repo.git"

// server is a git server with one repository and counters of the requests it served.
type server struct {
	t    testing.TB
	srv  *gittestserver.GitServer
	bare string // the served bare repository
	work string // a working clone the tests commit in
	ca   []byte // the CA of the HTTPS certificate

	infoRefs    atomic.Int64  // GET …/info/refs: ls-remote, and the start of every fetch
	uploadPacks atomic.Int64  // POST …/git-upload-pack: fetches that asked for objects
	bytesOut    atomic.Int64  // response bytes of upload-pack
	hang        atomic.Value  // string: "info/refs" or "git-upload-pack" requests wait for the client to go
	release     chan struct{} // closed at cleanup: hung requests end
}

type serverOptions struct {
	user, password string // basic auth (HTTP)
	tls            bool
}

// newServer makes an empty repository (branch main) served over HTTP (or HTTPS).
func newServer(t testing.TB, o serverOptions) *server {
	t.Helper()
	s := &server{t: t, srv: gittestserver.NewGitServer(t.TempDir()), work: t.TempDir(), release: make(chan struct{})}
	s.hang.Store("")
	if o.user != "" {
		s.srv.Auth(o.user, o.password)
	}
	s.srv.AddHTTPMiddlewares(s.count)
	s.bare = filepath.Join(s.srv.Root(), repoName)
	runGit(t, s.srv.Root(), "init", "-q", "--bare", "-b", "main", repoName)
	runGit(t, s.work, "init", "-q", "-b", "main")
	if o.tls {
		cert, key, ca, name := testCerts(t)
		s.ca = ca
		if err := s.srv.StartHTTPS(cert, key, ca, name); err != nil {
			t.Fatal(err)
		}
	} else if err := s.srv.StartHTTP(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.srv.StopHTTP)
	t.Cleanup(func() { close(s.release) }) // runs first: StopHTTP waits for handlers
	return s
}

// url is the repository's HTTP(S) URL, without credentials.
func (s *server) url() string { return s.srv.HTTPAddress() + "/" + repoName }

// hostPort is how errors name the server.
func (s *server) hostPort() string {
	u := s.srv.HTTPAddress()
	return u[strings.Index(u, "://")+3:]
}

// count is the HTTP middleware that counts requests and bytes, and hangs requests on demand.
func (s *server) count(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hang := s.hang.Load().(string)
		switch {
		case strings.HasSuffix(r.URL.Path, "/info/refs"):
			s.infoRefs.Add(1)
		case strings.HasSuffix(r.URL.Path, "/git-upload-pack"):
			s.uploadPacks.Add(1)
		}
		if hang != "" && strings.HasSuffix(r.URL.Path, hang) {
			_, _ = io.Copy(io.Discard, r.Body) // so the server notices when the client goes
			select {
			case <-r.Context().Done():
			case <-s.release:
			}
			return
		}
		next.ServeHTTP(&countingWriter{ResponseWriter: w, n: &s.bytesOut, on: strings.HasSuffix(r.URL.Path, "/git-upload-pack")}, r)
	})
}

type countingWriter struct {
	http.ResponseWriter
	n  *atomic.Int64
	on bool
}

func (w *countingWriter) Write(p []byte) (int, error) {
	if w.on {
		w.n.Add(int64(len(p)))
	}
	return w.ResponseWriter.Write(p)
}

func (w *countingWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// commit writes files (an empty content removes the file), commits and pushes to main; it
// returns the commit.
func (s *server) commit(files map[string]string) string {
	s.t.Helper()
	for name, content := range files {
		p := filepath.Join(s.work, name)
		if content == "" {
			if err := os.RemoveAll(p); err != nil {
				s.t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			s.t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			s.t.Fatal(err)
		}
	}
	return s.commitWork()
}

// commitWork commits whatever the working clone holds and pushes it to main.
func (s *server) commitWork() string {
	s.t.Helper()
	runGit(s.t, s.work, "add", "-A")
	runGit(s.t, s.work, "commit", "-q", "--allow-empty", "-m", "change")
	runGit(s.t, s.work, "push", "-q", "-f", s.bare, "HEAD:refs/heads/main")
	return strings.TrimSpace(runGit(s.t, s.work, "rev-parse", "HEAD"))
}

// runGit runs the git CLI in dir, isolated from the user's configuration.
func runGit(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=test", "-c", "user.email=test@example.com", "-c", "init.defaultBranch=main"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+dir, "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("git %s: %v: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.String()
}

// testCerts makes a CA and a server certificate for 127.0.0.1, as StartHTTPS takes them.
func testCerts(t testing.TB) (cert, key, ca []byte, serverName string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test git CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	srvKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(srvKey)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srvDER}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		"127.0.0.1"
}

// startSSH serves the repository over SSH too; it returns the ssh:// URL and the known_hosts
// line of the server's host key.
func (s *server) startSSH() (url, knownHosts string) {
	s.t.Helper()
	keyDir := s.t.TempDir()
	s.srv.KeyDir(keyDir)
	if err := s.srv.ListenSSH(); err != nil {
		s.t.Fatal(err)
	}
	go func() { _ = s.srv.StartSSH() }()
	s.t.Cleanup(func() { _ = s.srv.StopSSH() })
	// Over SSH (not stateless), git upload-pack serves a commit no ref names only when told to.
	runGit(s.t, s.bare, "config", "uploadpack.allowReachableSHA1InWant", "true")
	// gitkit writes its host key's public half beside the private key.
	raw, err := os.ReadFile(filepath.Join(keyDir, "gitkit.rsa.pub"))
	if err != nil {
		s.t.Fatal(err)
	}
	key, _, _, _, err := gossh.ParseAuthorizedKey(raw)
	if err != nil {
		s.t.Fatal(err)
	}
	addr := strings.TrimPrefix(s.srv.SSHAddress(), "ssh://git@")
	return s.srv.SSHAddress() + "/" + repoName, knownHostsLine(s.t, addr, key)
}

func knownHostsLine(t testing.TB, addr string, key gossh.PublicKey) string {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return "[" + host + "]:" + port + " " + strings.TrimSpace(string(gossh.MarshalAuthorizedKey(key))) + "\n"
}

// sshClientKey is a fresh client key in OpenSSH PEM form.
func sshClientKey(t *testing.T) []byte {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := gossh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(block)
}

// otherHostKey is a host key that is not the server's: of the server's type (RSA), or not.
func otherHostKey(t *testing.T, sameType bool) gossh.PublicKey {
	t.Helper()
	var pub any
	if sameType {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			t.Fatal(err)
		}
		pub = &k.PublicKey
	} else {
		k, _, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		pub = k
	}
	k, err := gossh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// newCache is a Cache under a test directory.
func newCache(t *testing.T, o Options) *Cache {
	t.Helper()
	if o.Root == "" {
		o.Root = t.TempDir()
	}
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}
