package kubeconfig

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// lookedAt is where the caller's kubeconfig is read from, as kubectl reads it.
const lookedAt = "looked at --kubeconfig, $KUBECONFIG, ~/.kube/config"

// upstreamHint ends every error that may come from pointing at the wrong
// cluster.
const upstreamHint = "is your kubeconfig's context the fleet upstream (management) cluster?"

// requestTimeout bounds each request of a command to the upstream, so a
// server that accepts connections and never answers is an error, not a
// hang.
const requestTimeout = 30 * time.Second

// Upstream is the caller's connection to the upstream (fleet management)
// cluster, read from their kubeconfig: every command that talks to the
// upstream (fleet kubeconfig, fleet rollout, fleet diff --live) reads it
// here, so all of them word a missing, wrong or unreachable upstream alike.
type Upstream struct {
	// Raw is the kubeconfig as loaded (merged, LocationOfOrigin set).
	Raw *clientcmdapi.Config
	// Context is the context used.
	Context string
	// REST reaches the upstream API server as the caller.
	REST *rest.Config
}

// LoadUpstream reads the caller's kubeconfig (path, else $KUBECONFIG, else
// ~/.kube/config) and the context (empty: its current context).
func LoadUpstream(path, context string) (*Upstream, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	raw, err := rules.Load()
	if err != nil {
		return nil, fmt.Errorf("reading your kubeconfig: %w", err)
	}
	if len(raw.Contexts) == 0 {
		return nil, errors.New("your kubeconfig has no context (" + lookedAt + "): point it at the upstream (fleet management) cluster")
	}
	name := context
	if name == "" {
		name = raw.CurrentContext
	}
	known := strings.Join(slices.Sorted(maps.Keys(raw.Contexts)), ", ")
	if name == "" {
		return nil, fmt.Errorf("your kubeconfig has no current context (%s): give --context, one of %s", lookedAt, known)
	}
	if _, ok := raw.Contexts[name]; !ok {
		return nil, fmt.Errorf("your kubeconfig has no context %q (%s; its contexts: %s)", name, lookedAt, known)
	}
	cfg, err := clientcmd.NewNonInteractiveClientConfig(*raw, name, &clientcmd.ConfigOverrides{}, rules).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("context %q of your kubeconfig: %w", name, err)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = requestTimeout
	}
	return &Upstream{Raw: raw, Context: name, REST: cfg}, nil
}

// Explain says what a failed request for what (fleet.cattle.io objects:
// "AgentRollouts", "Cluster fleet-default/dev-1") to the upstream means: a
// server that does not serve them is probably not the fleet upstream; a
// server that cannot be reached is named with the context; an answer of the
// API server (forbidden, not found) is kept as it is, with the server.
func (u *Upstream) Explain(err error, what string) error {
	if err == nil {
		return nil
	}
	var status apierrors.APIStatus
	switch {
	case meta.IsNoMatchError(err):
		return fmt.Errorf("%s (context %q) does not serve fleet.cattle.io %s: %s (%w)", u.REST.Host, u.Context, what, upstreamHint, err)
	case errors.As(err, &status):
		return fmt.Errorf("asking %s (context %q) for %s: %w", u.REST.Host, u.Context, what, err)
	default:
		return fmt.Errorf("cannot reach the upstream API server %s (context %q of your kubeconfig): %w: %s", u.REST.Host, u.Context, err, upstreamHint)
	}
}

// requestError is a request to the upstream that failed for Check; Generate
// words it as Explain does (Check's callers without an Upstream see the
// server and the error).
type requestError struct {
	what string
	err  error
}

func (e *requestError) Error() string { return e.what + ": " + e.err.Error() }
func (e *requestError) Unwrap() error { return e.err }

func (u *Upstream) explainCheck(err error) error {
	var re *requestError
	if errors.As(err, &re) {
		return u.Explain(re.err, re.what)
	}
	return fmt.Errorf("%w (context %q of your kubeconfig)", err, u.Context)
}
