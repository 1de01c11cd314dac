// Package gitserver is a real git server for the dev harness and the tests:
// the repositories of a directory served by the git binaries (fluxcd's
// gittestserver and gitkit: `git upload-pack`) over smart HTTPS (a CA of its
// own, CA()) with basic auth and over SSH with one authorized client key, and a host key that the
// server's known_hosts lines name. Commit writes files into a served
// repository with go-git, so tests and the demo push commits as a user
// would. It is not part of the product: `fleet-dev git-server` and the e2e
// suite start it.
//
// Both listeners are on 127.0.0.1. The dev clusters' pods reach them through
// devcluster's host address (State.ExposeHost), which iptables sends to
// 127.0.0.1, as it does for the clusters' API servers.
package gitserver

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fluxcd/gitkit"
	"github.com/fluxcd/pkg/gittestserver"
	"github.com/go-git/go-billy/v5/memfs"
	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-billy/v5/util"
	gogit "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// Server serves the bare repositories under Root().
type Server struct {
	srv *gittestserver.GitServer
	// Username and Password are the HTTP basic-auth credentials.
	Username, Password string
	// ClientKey is the PEM (OpenSSH) private key the SSH server accepts,
	// and the only one.
	ClientKey []byte
	// CA is the PEM certificate of the CA of the HTTPS server's certificate
	// (a GitRepo's caBundle).
	CA      []byte
	hostKey ssh.PublicKey
	sshDone chan error

	mu sync.Mutex // commits, one at a time per server
	// Requests counts the HTTP requests served (ls-remotes and fetches).
	Requests atomic.Int64
	// InfoRefs counts GET …/info/refs (an ls-remote, and the start of every
	// fetch), UploadPacks POST …/git-upload-pack (fetches), UploadPackBytes
	// the bytes those answered (the git data clients fetched).
	InfoRefs, UploadPacks, UploadPackBytes atomic.Int64
	perRepo                                sync.Map // repository name (first path element) -> *atomic.Int64
}

// RequestsFor is how many HTTP requests named repository name (e.g.
// "apps.git"), whatever their answer.
func (s *Server) RequestsFor(name string) int64 {
	if n, ok := s.perRepo.Load(name); ok {
		return n.(*atomic.Int64).Load()
	}
	return 0
}

// Options configure Start.
type Options struct {
	// Dir holds the bare repositories (name.git) and the server's keys.
	Dir string
	// Username and Password for HTTP; empty: fleet and a random one.
	Username, Password string
	// Hosts are the addresses (IPs or DNS names) clients reach the server
	// at besides 127.0.0.1: the HTTPS certificate names them.
	Hosts []string
}

// the authorized key of the process's servers: gittestserver keeps its
// public key lookup in a package variable.
var (
	authorizedMu sync.Mutex
	authorized   = map[string]bool{}
)

func lookupKey(content string) (*gitkit.PublicKey, error) {
	authorizedMu.Lock()
	defer authorizedMu.Unlock()
	if !authorized[strings.TrimSpace(content)] {
		return nil, errors.New("public key not authorized")
	}
	return &gitkit.PublicKey{Id: "fleet-dev"}, nil
}

// Start serves o.Dir over HTTP (basic auth) and SSH (the generated client
// key only), both on 127.0.0.1 with ports chosen by the system.
func Start(o Options) (*Server, error) {
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "repos"), 0o755); err != nil {
		return nil, err
	}
	s := &Server{Username: o.Username, Password: o.Password, sshDone: make(chan error, 1)}
	if s.Username == "" {
		s.Username = "fleet"
	}
	if s.Password == "" {
		s.Password = randomToken()
	}
	key, authorizedKey, err := newClientKey()
	if err != nil {
		return nil, err
	}
	s.ClientKey = key
	authorizedMu.Lock()
	authorized[authorizedKey] = true
	authorizedMu.Unlock()

	s.srv = gittestserver.NewGitServer(filepath.Join(dir, "repos")).KeyDir(filepath.Join(dir, "keys"))
	s.srv.Auth(s.Username, s.Password)
	s.srv.PublicKeyLookupFunc(lookupKey)
	s.srv.AddHTTPMiddlewares(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.Requests.Add(1)
			repo, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
			n, _ := s.perRepo.LoadOrStore(repo, new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
			switch {
			case strings.HasSuffix(r.URL.Path, "/info/refs"):
				s.InfoRefs.Add(1)
			case strings.HasSuffix(r.URL.Path, "/git-upload-pack"):
				s.UploadPacks.Add(1)
				w = &countingWriter{ResponseWriter: w, n: &s.UploadPackBytes}
			}
			next.ServeHTTP(w, r)
		})
	})
	cert, key, ca, err := certificates(append([]string{"127.0.0.1"}, o.Hosts...))
	if err != nil {
		return nil, err
	}
	s.CA = ca
	if err := s.srv.StartHTTPS(cert, key, ca, "127.0.0.1"); err != nil {
		return nil, fmt.Errorf("git server: HTTP: %w", err)
	}
	if err := s.srv.ListenSSH(); err != nil {
		s.srv.StopHTTP()
		return nil, fmt.Errorf("git server: SSH: %w", err)
	}
	go func() { s.sshDone <- s.srv.StartSSH() }()
	// The host key is written by ListenSSH's setup.
	raw, err := os.ReadFile(filepath.Join(dir, "keys", "gitkit.rsa.pub"))
	if err != nil {
		s.Stop()
		return nil, fmt.Errorf("git server: host key: %w", err)
	}
	if s.hostKey, _, _, _, err = ssh.ParseAuthorizedKey(raw); err != nil {
		s.Stop()
		return nil, fmt.Errorf("git server: host key: %w", err)
	}
	return s, nil
}

// Stop closes both listeners.
func (s *Server) Stop() {
	s.srv.StopHTTP()
	_ = s.srv.StopSSH()
}

// Root is the directory of the bare repositories.
func (s *Server) Root() string { return s.srv.Root() }

// HTTPPort is the HTTPS listener's port on 127.0.0.1.
func (s *Server) HTTPPort() int { return portOf(s.srv.HTTPAddress()) }

// SSHPort is the SSH listener's port on 127.0.0.1.
func (s *Server) SSHPort() int { return portOf(s.srv.SSHAddress()) }

func portOf(u string) int {
	p, err := url.Parse(u)
	if err != nil {
		return 0
	}
	var port int
	_, _ = fmt.Sscan(p.Port(), &port)
	return port
}

// HTTPURL is the repository's URL over HTTPS at host (an address the client
// reaches the server on: 127.0.0.1, or devcluster's host address for pods).
func (s *Server) HTTPURL(host, repo string) string {
	return fmt.Sprintf("https://%s/%s", net.JoinHostPort(host, fmt.Sprint(s.HTTPPort())), repo)
}

// SSHURL is the repository's URL over SSH at host.
func (s *Server) SSHURL(host, repo string) string {
	return fmt.Sprintf("ssh://git@%s/%s", net.JoinHostPort(host, fmt.Sprint(s.SSHPort())), repo)
}

// KnownHosts is the known_hosts line of the SSH server as clients reach it
// at host.
func (s *Server) KnownHosts(host string) []byte {
	addr := knownhosts.Normalize(net.JoinHostPort(host, fmt.Sprint(s.SSHPort())))
	return []byte(knownhosts.Line([]string{addr}, s.hostKey) + "\n")
}

// CreateRepo makes an empty bare repository name (e.g. "apps.git") whose
// HEAD is branch.
func (s *Server) CreateRepo(name, branch string) error {
	dir := filepath.Join(s.Root(), filepath.Clean("/"+name))
	r, err := gogit.PlainInit(dir, true)
	if err != nil {
		return fmt.Errorf("repository %s: %w", name, err)
	}
	return r.Storer.SetReference(plumbing.NewSymbolicReference(plumbing.HEAD, plumbing.NewBranchReferenceName(branch)))
}

// Commit writes files into repository name on its HEAD branch as one
// commit and returns the commit's hash. A nil content removes the path (a
// file or a directory with everything under it).
func (s *Server) Commit(name string, files map[string][]byte, message string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	dir := filepath.Join(s.Root(), filepath.Clean("/"+name))
	// The bare repository's objects, and the work tree in memory.
	st := filesystem.NewStorage(osfs.New(dir), cache.NewObjectLRUDefault())
	r, err := gogit.Open(st, memfs.New())
	if err != nil {
		return "", fmt.Errorf("repository %s: %w", name, err)
	}
	w, err := r.Worktree()
	if err != nil {
		return "", err
	}
	head, err := r.Storer.Reference(plumbing.HEAD)
	if err != nil {
		return "", err
	}
	if _, err := r.Head(); err == nil {
		if err := w.Checkout(&gogit.CheckoutOptions{Branch: head.Target(), Force: true}); err != nil {
			return "", fmt.Errorf("repository %s: checkout: %w", name, err)
		}
	}
	for p, content := range files {
		p = strings.TrimPrefix(filepath.ToSlash(filepath.Clean("/"+p)), "/")
		if content == nil {
			if err := util.RemoveAll(w.Filesystem, p); err != nil {
				return "", err
			}
			continue
		}
		if err := util.WriteFile(w.Filesystem, p, content, 0o644); err != nil {
			return "", err
		}
	}
	if err := w.AddWithOptions(&gogit.AddOptions{All: true}); err != nil {
		return "", fmt.Errorf("repository %s: add: %w", name, err)
	}
	sig := &object.Signature{Name: "fleet-dev", Email: "fleet-dev@example.com", When: time.Now()}
	h, err := w.Commit(message, &gogit.CommitOptions{Author: sig, AllowEmptyCommits: true, All: true})
	if err != nil {
		return "", fmt.Errorf("repository %s: commit: %w", name, err)
	}
	return h.String(), nil
}

// ReadFile returns the content of path at the HEAD of repository name.
func (s *Server) ReadFile(name, path string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := gogit.PlainOpen(filepath.Join(s.Root(), filepath.Clean("/"+name)))
	if err != nil {
		return nil, fmt.Errorf("repository %s: %w", name, err)
	}
	head, err := r.Head()
	if err != nil {
		return nil, fmt.Errorf("repository %s: %w", name, err)
	}
	c, err := r.CommitObject(head.Hash())
	if err != nil {
		return nil, err
	}
	f, err := c.File(path)
	if err != nil {
		return nil, fmt.Errorf("repository %s, %s: %w", name, path, err)
	}
	content, err := f.Contents()
	return []byte(content), err
}

// CommitDir commits the files of dir (recursively) into repository name
// (added or overwritten; other files stay).
func (s *Server) CommitDir(name, dir, message string) (string, error) {
	files, err := DirFiles(dir)
	if err != nil {
		return "", err
	}
	return s.Commit(name, files, message)
}

// DirFiles reads the files of dir (recursively), by slash-separated path
// relative to dir: what Commit takes.
func DirFiles(dir string) (map[string][]byte, error) {
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		files[filepath.ToSlash(rel)] = b
		return err
	})
	return files, err
}

func randomToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%x", b)
}

// newClientKey is an SSH client key: its PEM (OpenSSH format) and its
// authorized_keys line.
func newClientKey() (key []byte, authorizedKey string, err error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, "", err
	}
	block, err := ssh.MarshalPrivateKey(priv, "fleet-dev git client")
	if err != nil {
		return nil, "", err
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		return nil, "", err
	}
	return pem.EncodeToMemory(block), strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sshPub))), nil
}

// certificates makes a CA and a serving certificate for hosts, valid for a
// year.
func certificates(hosts []string) (cert, key, ca []byte, err error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fleet-dev git server CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(1, 0, 0),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, nil, nil, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, nil, nil, err
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "fleet-dev git server"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(1, 0, 0),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		return nil, nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		return nil, nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), nil
}

// countingWriter counts the bytes of a response.
type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.n.Add(int64(len(p)))
	return w.ResponseWriter.Write(p)
}

func (w *countingWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
