package webhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
)

// Server serves a Receiver on its own listener, as a manager Runnable.
type Server struct {
	// Addr is the address to listen on (":8090").
	Addr    string
	Handler http.Handler
	// listening, when set, gets the listener's address once it listens
	// (tests listen on ":0").
	listening func(net.Addr)
}

// NewServer returns a Server of h on addr.
func NewServer(addr string, h http.Handler) *Server { return &Server{Addr: addr, Handler: h} }

// Start listens and serves until ctx ends, then shuts down within 10 s.
// Every request is bounded: 10 s for its headers (64 KiB at most), 30 s to
// read it and 30 s to answer.
func (s *Server) Start(ctx context.Context) error {
	l, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return fmt.Errorf("webhook: listening on %s: %w", s.Addr, err)
	}
	if s.listening != nil {
		s.listening(l.Addr())
	}
	mux := http.NewServeMux()
	mux.Handle("/", s.Handler)
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    64 << 10,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// NeedLeaderElection: the receiver listens on the leader only, where the
// GitRepo controller whose Trigger it calls runs.
func (s *Server) NeedLeaderElection() bool { return true }

// Setup registers RepoIndex on the manager's cache and adds a Server of
// a Receiver on addr to the manager. Options' Client and APIReader default
// to the manager's.
func Setup(ctx context.Context, mgr ctrl.Manager, addr string, opts Options) (*Receiver, error) {
	if err := IndexGitRepos(ctx, mgr.GetFieldIndexer()); err != nil {
		return nil, fmt.Errorf("webhook: indexing GitRepos: %w", err)
	}
	if opts.Client == nil {
		opts.Client = mgr.GetClient()
	}
	if opts.APIReader == nil {
		opts.APIReader = mgr.GetAPIReader()
	}
	if opts.Log.GetSink() == nil {
		opts.Log = mgr.GetLogger().WithName("webhook")
	}
	rc, err := New(opts)
	if err != nil {
		return nil, err
	}
	if err := mgr.Add(NewServer(addr, rc)); err != nil {
		return nil, err
	}
	return rc, nil
}
