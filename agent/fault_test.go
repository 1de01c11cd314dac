package agent_test

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gitops-fleet/fleet/agent"
	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/reconciler"
	"github.com/gitops-fleet/fleet/internal/registration"
)

// refusingTransport fails the requests refuse matches as a refused
// connection does, and passes the others to the real API server.
type refusingTransport struct {
	next   http.RoundTripper
	refuse func(*http.Request) bool
}

func (r *refusingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if r.refuse(req) {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: &net.AddrError{Err: syscall.ECONNREFUSED.Error(), Addr: req.URL.Host}}
	}
	return r.next.RoundTrip(req)
}

func registrationsIn(t *testing.T, ws string) int {
	t.Helper()
	list := &fleet.ClusterRegistrationList{}
	if err := up.List(t.Context(), list, client.InNamespace(ws)); err != nil {
		t.Fatal(err)
	}
	return len(list.Items)
}

// TestAgent_LocalAPIServerUnreachableIsNotAMissingCredential: an agent that
// cannot reach the API server of its own cluster reports
// DownstreamAPIUnreachable, not NoBootstrapCredential (whose fix, a
// reinstall, is wrong for a network fault).
func TestAgent_LocalAPIServerUnreachableIsNotAMissingCredential(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close() // nothing listens there any more: connection refused
	a, err := agent.New(agent.Options{
		Local: &rest.Config{Host: "https://" + closed, Timeout: 5 * time.Second}, Namespace: "cattle-fleet-system", PodName: "agent-unreachable",
	})
	if err != nil {
		t.Fatal(err)
	}
	err = a.ConnectOnce(t.Context())
	var stuck *reconciler.Stalled
	if errors.As(err, &stuck) {
		t.Fatalf("reported as the stuck state %s: %v", stuck.Reason, err)
	}
	if r := agent.FaultReason(err); r != fleet.DownstreamAPIUnreachableReason {
		t.Fatalf("reason %q, want %s (error: %v)", r, fleet.DownstreamAPIUnreachableReason, err)
	}
	if !strings.Contains(err.Error(), "cannot reach the API server of this cluster") || !strings.Contains(err.Error(), "keeps its credentials") {
		t.Errorf("message does not say what is wrong: %v", err)
	}
}

// TestAgent_NetworkFaultsKeepAWorkingCredential: a registered agent whose
// reads of its own credential Secret fail with a network error keeps the
// credential (it registers no second time) and reports
// DownstreamAPIUnreachable; one whose upstream is unreachable keeps it too,
// reports UpstreamUnreachable as a Warning event, and connects with the same
// credential once the network is back.
func TestAgent_NetworkFaultsKeepAWorkingCredential(t *testing.T) {
	ds := env.Downstreams[1]
	ws := testenv.Namespace(t, up, "fleet-ws-")
	values := newToken(t, ws, "tok", fleet.ClusterRegistrationTokenSpec{})
	agentNS := "agent-" + ws
	helmInstall(t, ds, agentNS, values, map[string]any{"clientID": "net-" + ws})
	a := startAgent(t, ds, agentNS, nil)
	_, name := waitRegistered(t, a)
	waitReady(t, ws, name, metav1.ConditionTrue, fleet.AgentHeartbeatReason)
	a.stop()
	if n := registrationsIn(t, ws); n != 1 {
		t.Fatalf("%d registrations after the first, want 1", n)
	}
	before, err := localSecret(t, ds, agentNS, registration.AgentCredentialSecretName)
	if err != nil {
		t.Fatal(err)
	}

	// The local API server is unreachable exactly when the agent reads its
	// credential (the identity Secret before it still reads).
	var refusing atomic.Bool
	refusing.Store(true)
	local := rest.CopyConfig(ds.Config)
	local.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return &refusingTransport{next: rt, refuse: func(r *http.Request) bool {
			return refusing.Load() && r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/namespaces/"+agentNS+"/secrets/"+registration.AgentCredentialSecretName)
		}}
	}
	g := int64(0)
	flaky, err := agent.New(agent.Options{Local: local, Namespace: agentNS, PodName: "agent-" + agentNS, CheckinInterval: heartbeat, Generation: &g, RegistrationTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = flaky.ConnectOnce(t.Context())
	if r := agent.FaultReason(err); r != fleet.DownstreamAPIUnreachableReason {
		t.Fatalf("reading the credential failed with reason %q, want %s (error: %v)", r, fleet.DownstreamAPIUnreachableReason, err)
	}
	if n := registrationsIn(t, ws); n != 1 {
		t.Fatalf("%d registrations: a network error made the agent register again, throwing away a working credential", n)
	}
	refusing.Store(false)
	if err := flaky.ConnectOnce(t.Context()); err != nil {
		t.Fatalf("once the network is back: %v", err)
	}
	if n := registrationsIn(t, ws); n != 1 {
		t.Fatalf("%d registrations once the network is back, want the first only", n)
	}

	// The upstream unreachable: the stored credential points at a closed port.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	cred, err := localSecret(t, ds, agentNS, registration.AgentCredentialSecretName)
	if err != nil {
		t.Fatal(err)
	}
	setServer(t, cred, "https://"+closed)
	if err := ds.Client.Update(t.Context(), cred); err != nil {
		t.Fatal(err)
	}
	startAgent(t, ds, agentNS, nil)
	testenv.Eventually(t, 30*time.Second, "an UpstreamUnreachable event", func() error {
		evs := &corev1.EventList{}
		if err := ds.Client.List(t.Context(), evs, client.InNamespace(agentNS)); err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Reason == fleet.UpstreamUnreachableReason && e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, closed) {
				return nil
			}
		}
		return fmt.Errorf("%d events, none UpstreamUnreachable", len(evs.Items))
	})
	after, err := localSecret(t, ds, agentNS, registration.AgentCredentialSecretName)
	if err != nil {
		t.Fatalf("the credential is gone: %v", err)
	}
	if string(after.Data[registration.KeyClusterName]) != string(before.Data[registration.KeyClusterName]) || registrationsIn(t, ws) != 1 {
		t.Fatalf("the agent registered again while the upstream was unreachable")
	}
}

// setServer points the kubeconfig of the agent's credential Secret at url.
func setServer(t *testing.T, s *corev1.Secret, url string) {
	t.Helper()
	kc, err := clientcmd.Load(s.Data[registration.KeyKubeconfig])
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range kc.Clusters {
		c.Server = url
	}
	if s.Data[registration.KeyKubeconfig], err = clientcmd.Write(*kc); err != nil {
		t.Fatal(err)
	}
}
