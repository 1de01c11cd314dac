// Package renderenv runs the renderer (`fleet renderer`) as a real process on
// this machine for tests and the bench, as the chart runs it in a cluster:
// its credentials are the files of Secret fleet-renderer-tls, written here as
// the kubelet mounts them; it listens on 127.0.0.1 and holds no Kubernetes
// credential. A test binary serves as the renderer when its TestMain calls
// ServeIfRenderer (testenv.Main does), as it serves as a render worker.
package renderenv

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/gitops-fleet/fleet/internal/renderservice"
)

// envOptions, set to the JSON of renderservice.ServerOptions, makes a test
// binary the renderer.
const envOptions = "FLEET_DEV_RENDERER"

// ServeIfRenderer makes this test binary the renderer when Start started it
// so: it serves until SIGTERM and exits. Otherwise it returns at once. Call
// it first thing in TestMain, after renderworker.ServeIfWorker.
func ServeIfRenderer() {
	raw := os.Getenv(envOptions)
	if raw == "" {
		return
	}
	var opts renderservice.ServerOptions
	if err := json.Unmarshal([]byte(raw), &opts); err != nil {
		fmt.Fprintln(os.Stderr, "renderer:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := zap.New(zap.WriteTo(os.Stderr), zap.UseDevMode(true))
	if err := renderservice.Serve(logr.NewContext(ctx, log), opts); err != nil {
		fmt.Fprintln(os.Stderr, "renderer:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// Options configure a renderer process.
type Options struct {
	// Binary is the fleet binary, run as `fleet renderer`; empty: this
	// test binary (its TestMain must call ServeIfRenderer).
	Binary string
	// Dir receives the credentials directory and the renderer's log.
	Dir string
	// Concurrency is the renderer's --concurrency (zero: its default).
	Concurrency int
	// TokenPath is where the renderer looks for a Kubernetes credential
	// (test binary only; zero: the real path).
	TokenPath string
}

// Renderer is a running renderer process.
type Renderer struct {
	// URL is what the controller is given (--renderer-url).
	URL string
	// Log is the file its output goes to.
	Log string

	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// FreeAddress returns a free address on host (an IP of this machine), to
// tell the controller before the renderer starts.
func FreeAddress(host string) (string, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// Start starts a renderer on addr with the files of creds, and waits (up to
// a minute) until it answers /readyz with a certificate creds.CA verifies.
func Start(ctx context.Context, addr string, creds *renderservice.Credentials, opts Options) (*Renderer, error) {
	credDir := filepath.Join(opts.Dir, "renderer-credentials")
	if err := renderservice.WriteServerFiles(credDir, creds); err != nil {
		return nil, err
	}
	r := &Renderer{URL: "https://" + addr, Log: filepath.Join(opts.Dir, "renderer.log"), done: make(chan struct{})}
	logf, err := os.Create(r.Log)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	if opts.Binary != "" {
		args := []string{"renderer", "--listen", addr, "--credentials-dir", credDir, "--dev-log"}
		if opts.Concurrency > 0 {
			args = append(args, "--concurrency", strconv.Itoa(opts.Concurrency))
		}
		r.cmd = exec.Command(opts.Binary, args...)
	} else {
		self, err := os.Executable()
		if err != nil {
			return nil, err
		}
		raw, err := json.Marshal(renderservice.ServerOptions{Listen: addr, CredentialsDir: credDir, Concurrency: opts.Concurrency, TokenPath: opts.TokenPath})
		if err != nil {
			return nil, err
		}
		r.cmd = exec.Command(self)
		r.cmd.Env = append(os.Environ(), envOptions+"="+string(raw))
	}
	r.cmd.Stdout, r.cmd.Stderr = logf, logf
	if err := r.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the renderer: %w", err)
	}
	go func() {
		r.err = r.cmd.Wait()
		close(r.done)
	}()
	if err := r.waitReady(ctx, creds, time.Minute); err != nil {
		_ = r.Stop()
		return nil, fmt.Errorf("%w\nrenderer log:\n%s", err, r.LogTail())
	}
	return r, nil
}

// StartFromSecret waits (up to two minutes) for the controller to make
// Secret namespace/name, as the renderer's pod waits for its volume, then
// starts the renderer on addr with its files.
func StartFromSecret(ctx context.Context, c client.Reader, namespace, name, addr string, opts Options) (*Renderer, error) {
	var creds *renderservice.Credentials
	deadline := time.Now().Add(2 * time.Minute)
	for {
		s := &corev1.Secret{}
		err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, s)
		if err == nil {
			if creds, err = renderservice.CredentialsFromSecretData(s.Data); err == nil {
				break
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the controller made no valid Secret %s/%s within 2m: %w", namespace, name, err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return Start(ctx, addr, creds, opts)
}

func (r *Renderer) waitReady(ctx context.Context, creds *renderservice.Credentials, timeout time.Duration) error {
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(creds.CA)
	// The name the certificate is for, which need not be the address
	// listened on (a Service name).
	serverName := ""
	if pair, err := tls.X509KeyPair(creds.Cert, creds.Key); err == nil && len(pair.Leaf.DNSNames) > 0 {
		serverName = pair.Leaf.DNSNames[0]
	}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: serverName, MinVersion: tls.VersionTLS13}}}
	defer hc.CloseIdleConnections()
	deadline := time.Now().Add(timeout)
	var last error
	for {
		resp, err := hc.Get(r.URL + renderservice.ReadyPath)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = errors.New(resp.Status)
		}
		last = err
		select {
		case <-r.done:
			return fmt.Errorf("the renderer exited: %v", r.err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the renderer did not answer %s within %s: %v", renderservice.ReadyPath, timeout, last)
		}
	}
}

// Pid is the renderer process's ID.
func (r *Renderer) Pid() int { return r.cmd.Process.Pid }

// Done is closed when the process exited.
func (r *Renderer) Done() <-chan struct{} { return r.done }

// LogTail is the last 40 lines of the renderer's output.
func (r *Renderer) LogTail() string {
	b, _ := os.ReadFile(r.Log)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	return strings.Join(lines, "\n")
}

// Stop ends the renderer (SIGTERM, then SIGKILL after 40 s) and waits for
// it.
func (r *Renderer) Stop() error {
	select {
	case <-r.done:
		return nil
	default:
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
	case <-time.After(40 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.done
	}
	return nil
}
