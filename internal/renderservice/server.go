package renderservice

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"

	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/renderworker"
)

// ServiceAccountTokenPath is where Kubernetes mounts a pod's ServiceAccount
// token.
const ServiceAccountTokenPath = "/var/run/secrets/kubernetes.io/serviceaccount/token"

// ServerOptions configure the renderer.
type ServerOptions struct {
	// Listen is the TLS address (":8443").
	Listen string `json:"listen"`
	// CredentialsDir holds KeyCert, KeyKey and KeyTokenHash (the mounted
	// Secret); they are read again when they change.
	CredentialsDir string `json:"credentialsDir"`
	// Concurrency bounds the workers of this renderer, whatever the
	// requests ask (zero: the requests' limit only).
	Concurrency int `json:"concurrency"`
	// AllowKubernetesCredential lets the renderer start with a
	// ServiceAccount token mounted (development only).
	AllowKubernetesCredential bool `json:"allowKubernetesCredential"`
	// TokenPath is where a Kubernetes credential would be (zero:
	// ServiceAccountTokenPath); tests point it elsewhere.
	TokenPath string `json:"tokenPath,omitempty"`
	// BundleMaxSize is the controller's bundleMaxSize (zero: its
	// default): the largest request body follows it (MaxRequestBytes).
	BundleMaxSize int64 `json:"bundleMaxSize,omitempty"`
}

// ErrKubernetesCredential is why a renderer that finds a Kubernetes
// credential refuses to start.
var ErrKubernetesCredential = errors.New("a Kubernetes credential is mounted")

// credentialReload is how often the credentials files are read again: the
// kubelet updates a mounted Secret within about a minute.
const credentialReload = 10 * time.Second

// Serve runs the renderer until ctx ends: it refuses to start with a
// Kubernetes credential mounted, then serves render requests on
// opts.Listen. Renders in flight when ctx ends are given their time limit
// to finish.
func Serve(ctx context.Context, opts ServerOptions) error {
	log := logr.FromContextOrDiscard(ctx)
	tokenPath := opts.TokenPath
	if tokenPath == "" {
		tokenPath = ServiceAccountTokenPath
	}
	if _, err := os.Stat(tokenPath); err == nil {
		if !opts.AllowKubernetesCredential {
			return fmt.Errorf("%w at %s: the renderer runs Bundle authors' templates and must hold no credential; set automountServiceAccountToken: false on its pod (--allow-kubernetes-credential is for development only)", ErrKubernetesCredential, tokenPath)
		}
		log.Info("WARNING: a Kubernetes credential is mounted and --allow-kubernetes-credential is set: a Bundle author who escapes a render worker holds it", "path", tokenPath)
	}
	// Workers run as this process's user: they must not read its memory
	// (other Bundles' content in flight) through /proc or ptrace.
	if err := notDumpable(); err != nil {
		return fmt.Errorf("making the renderer's memory unreadable to its workers: %w", err)
	}
	s, err := newServer(opts, log)
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", opts.Listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", opts.Listen, err)
	}
	srv := &http.Server{
		Handler:           s.handler(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    16 << 10,
		TLSConfig: &tls.Config{
			MinVersion:     tls.VersionTLS13,
			GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return s.credentials().cert, nil },
		},
		BaseContext: func(net.Listener) context.Context {
			return logr.NewContext(context.Background(), log)
		},
	}
	log.Info("renderer serving", "address", lis.Addr().String(), "concurrency", opts.Concurrency)
	done := make(chan error, 1)
	go func() { done <- srv.ServeTLS(lis, "", "") }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	// A render in flight ends within its time limit (the worker is
	// killed then); the controller renders again what does not finish.
	shutdownCtx, cancel := context.WithTimeout(context.Background(), config.DefaultBundleRenderTimeout+5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		_ = srv.Close()
	}
	return nil
}

// server is the renderer's HTTP side.
type server struct {
	opts ServerOptions
	log  logr.Logger
	pool *renderworker.Pool

	mu       sync.Mutex
	creds    *serverCredentials
	readAt   time.Time
	readFail string // the last reload error, logged once
}

func newServer(opts ServerOptions, log logr.Logger) (*server, error) {
	creds, err := readServerCredentials(opts.CredentialsDir)
	if err != nil {
		return nil, err
	}
	// The pool's own limits are unused: every request carries its own.
	pool, err := renderworker.NewPool(func() renderworker.Limits { return renderworker.LimitsOf(&config.Config{}) })
	if err != nil {
		return nil, err
	}
	return &server{opts: opts, log: log, pool: pool, creds: creds, readAt: time.Now()}, nil
}

// credentials returns the credentials in force, read again from the
// directory every credentialReload; a directory that cannot be read (the
// kubelet replacing it) leaves the previous ones in force.
func (s *server) credentials() *serverCredentials {
	s.mu.Lock()
	defer s.mu.Unlock()
	if time.Since(s.readAt) < credentialReload {
		return s.creds
	}
	s.readAt = time.Now()
	c, err := readServerCredentials(s.opts.CredentialsDir)
	if err != nil {
		if msg := err.Error(); msg != s.readFail {
			s.readFail = msg
			s.log.Error(err, "reading the credentials again; the previous ones stay in force")
		}
		return s.creds
	}
	s.readFail = ""
	s.creds = c
	return c
}

func (s *server) handler() http.Handler {
	mux := http.NewServeMux()
	ok := func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }
	mux.HandleFunc("GET "+HealthPath, ok)
	mux.HandleFunc("GET "+ReadyPath, ok)
	mux.HandleFunc("POST "+RenderPath, s.render)
	return mux
}

// authenticate reports whether r carries the controller's bearer token.
func (s *server) authenticate(r *http.Request) (bool, string) {
	auth := r.Header.Get("Authorization")
	token, found := strings.CutPrefix(auth, "Bearer ")
	if !found || token == "" {
		return false, "no bearer token"
	}
	sum := sha256.Sum256([]byte(token))
	if subtle.ConstantTimeCompare(sum[:], s.credentials().tokenHash) != 1 {
		return false, "a bearer token that is not the controller's"
	}
	return true, ""
}

func (s *server) render(w http.ResponseWriter, r *http.Request) {
	if ok, why := s.authenticate(r); !ok {
		s.log.Info("refused a render request", "remoteAddress", r.RemoteAddr, "reason", why)
		w.Header().Set("WWW-Authenticate", `Bearer realm="fleet-renderer"`)
		http.Error(w, "unauthorized: "+why+"; only the fleet controller may call the renderer", http.StatusUnauthorized)
		return
	}
	var req request
	limit := MaxRequestBytes(s.opts.BundleMaxSize)
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit)).Decode(&req); err != nil {
		if errors.As(err, new(*http.MaxBytesError)) {
			http.Error(w, fmt.Sprintf("the request is larger than %d bytes (the renderer's --bundle-max-size %d allows for that much)", limit, s.opts.BundleMaxSize), http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "reading the render request: "+err.Error(), http.StatusBadRequest)
		return
	}
	lim, err := req.limits(s.opts.Concurrency)
	if err != nil {
		http.Error(w, "the render request's "+err.Error(), http.StatusBadRequest)
		return
	}
	start := time.Now()
	out, err := s.pool.RenderWithin(r.Context(), lim, req.Request)
	var resp response
	var re *renderworker.RenderError
	switch {
	case errors.As(err, &re):
		resp = response{Response: renderworker.Response{Reason: re.Reason, Error: re.Message}, MaxRSS: re.MaxRSS}
	case r.Context().Err() != nil:
		return // the controller gave up on it
	case err != nil:
		s.log.Error(err, "render failed in the renderer", "bundle", req.Name)
		http.Error(w, "the renderer could not render: "+err.Error(), http.StatusInternalServerError)
		return
	default:
		resp = response{Response: renderworker.Response{YAML: out.YAML}, ValuesResolved: true}
	}
	s.log.Info("rendered", "bundle", req.Name, "duration", time.Since(start).Round(time.Millisecond), "reason", resp.Reason)
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(resp); err != nil {
		s.log.V(1).Info("writing the answer failed", "bundle", req.Name, "error", err.Error())
	}
}

// notDumpable keeps processes of the same user (the render workers) from
// reading this process's memory, environment and files through /proc or
// attaching to it (PR_SET_DUMPABLE 0; workers start dumpable again, as
// exec resets it, which harms nothing).
func notDumpable() error {
	const prSetDumpable = 4
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetDumpable, 0, 0); errno != 0 {
		return errno
	}
	return nil
}
