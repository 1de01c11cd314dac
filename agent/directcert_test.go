package agent_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gitops-fleet/fleet/agent"
	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/direct"
	"github.com/gitops-fleet/fleet/internal/registration"
)

// operatorCert makes a CA and a serving certificate for names, as an
// operator would, and returns the fleet-agent-direct-tls Secret holding
// them (without the agent's label: the agent never replaces it).
func operatorCert(t *testing.T, ns string, names ...string) *corev1.Secret {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "operator CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: names[0]},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		DNSNames: names, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: direct.TLSSecretName},
		Type:       corev1.SecretTypeTLS,
		Data: map[string][]byte{
			corev1.TLSCertKey:       pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			corev1.TLSPrivateKeyKey: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
			"ca.crt":                pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		},
	}
}

// TestDirectEndpoint_CertificateHostMismatchReported: an operator's
// fleet-agent-direct-tls whose certificate is for a DNS name, with the
// endpoint's url at a node IP (the papercut: users got an x509 error at
// kubectl), is served anyway, and the Cluster says so: condition
// DirectEndpoint=False with reason DirectCertificateHostMismatch naming the
// host, the certificate's names and the fix, and one Warning event naming
// the host (not one per heartbeat). Setting url to a name of the
// certificate clears it. The agent's identity may report the names of its
// own Cluster only, and may not write the condition itself. The direct
// side starts as the agent stores its credential, not at a poll.
func TestDirectEndpoint_CertificateHostMismatchReported(t *testing.T) {
	ds := env.Downstreams[0]
	ws := testenv.Namespace(t, up, "fleet-ws-")
	values := newToken(t, ws, "tok", fleet.ClusterRegistrationTokenSpec{})
	agentNS := "agent-" + ws
	helmInstall(t, ds, agentNS, values, nil)
	if err := ds.Client.Create(t.Context(), operatorCert(t, agentNS, "dev-1.example.com")); err != nil {
		t.Fatal(err)
	}
	const nodeURL = "https://172.18.0.3:30443"
	g := int64(0)
	a, err := agent.New(agent.Options{
		Local: ds.Config, Namespace: agentNS, PodName: "agent-" + agentNS,
		CheckinInterval: heartbeat, Generation: &g, RegistrationTimeout: 20 * time.Second, ResyncInterval: 2 * time.Second,
		Direct: true, DirectURL: nodeURL, DirectAddress: "127.0.0.1:0", DirectSyncInterval: time.Second,
		// The direct side (and the tunnel) start when the agent stores
		// its credential, not at the next poll: none comes in this test.
		CredentialPoll: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	run := testenv.Go(ctx, "agent", a.Run)
	t.Cleanup(func() {
		cancel()
		if err := run.Wait(30 * time.Second); err != nil {
			t.Error(err)
		}
	})
	ws2, name := "", ""
	testenv.Eventually(t, 30*time.Second, "agent registered", func() error {
		if ws2, name = a.Registered(); name == "" {
			return fmt.Errorf("not registered")
		}
		return nil
	})
	if ws2 != ws {
		t.Fatalf("registered in %s", ws2)
	}
	// The Cluster's spec says what the agent was rendered with.
	updateCluster(t, ws, name, func(c *fleet.Cluster) {
		c.Spec.AgentDirectEndpoint = &fleet.DirectEndpointSpec{URL: nodeURL}
	})

	testenv.Eventually(t, 60*time.Second, "DirectEndpoint=False naming the host and the certificate's names", func() error {
		c := getCluster(t, ws, name)
		if !slices.Equal(c.Status.Agent.DirectEndpointCertificateNames, []string{"dev-1.example.com"}) {
			return fmt.Errorf("reported names %v", c.Status.Agent.DirectEndpointCertificateNames)
		}
		cond := meta.FindStatusCondition(c.Status.Conditions, fleet.DirectEndpointCondition)
		if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != fleet.DirectCertificateHostMismatchReason {
			return fmt.Errorf("DirectEndpoint condition %+v", cond)
		}
		for _, s := range []string{`"172.18.0.3"`, "dev-1.example.com", "subject alternative names", "fleet-agent-direct-tls"} {
			if !strings.Contains(cond.Message, s) {
				return fmt.Errorf("message %q does not say %s", cond.Message, s)
			}
		}
		if c.Status.Agent.DirectEndpointCA == "" {
			return fmt.Errorf("no CA reported: the endpoint is served with the operator's certificate anyway")
		}
		return nil
	})
	// Served anyway: the operator's Secret is untouched (not replaced by
	// one of the agent's).
	s := &corev1.Secret{}
	if err := ds.Client.Get(t.Context(), client.ObjectKey{Namespace: agentNS, Name: direct.TLSSecretName}, s); err != nil {
		t.Fatal(err)
	}
	if _, ours := s.Labels[registration.DirectLabel]; ours {
		t.Fatal("the agent replaced the operator's Secret")
	}
	// Heartbeats come every second: the event is recorded once.
	testenv.Eventually(t, 30*time.Second, "a Warning event on the Cluster naming the host", func() error {
		if n := clusterWarnings(t, ws, name, fleet.DirectCertificateHostMismatchReason, "172.18.0.3"); n != 1 {
			return fmt.Errorf("%d events", n)
		}
		return nil
	})
	testenv.Consistently(t, 3*time.Second, "one Warning event, not one per heartbeat", func() error {
		if n := clusterWarnings(t, ws, name, fleet.DirectCertificateHostMismatchReason, "172.18.0.3"); n != 1 {
			return fmt.Errorf("%d events", n)
		}
		return nil
	})

	// As the agent's own upstream identity (its credential's token): it
	// may report names on its Cluster, not write the condition, and not
	// report on another Cluster.
	asAgent := agentClient(t, agentNS)
	other := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "someone-else"}}
	if err := up.Create(t.Context(), other); err != nil {
		t.Fatal(err)
	}
	names := []byte(`{"status":{"agent":{"directEndpointCertificateNames":["dev-1.example.com"]}}}`)
	if err := asAgent.Status().Patch(t.Context(), &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: name}}, client.RawPatch(types.MergePatchType, names)); err != nil {
		t.Fatalf("the agent may not report its own certificate's names: %v", err)
	}
	if err := asAgent.Status().Patch(t.Context(), other, client.RawPatch(types.MergePatchType, names)); !apierrors.IsForbidden(err) {
		t.Fatalf("the agent reported names on another Cluster: %v", err)
	}
	own := getCluster(t, ws, name)
	conds := append([]metav1.Condition(nil), own.Status.Conditions...)
	meta.RemoveStatusCondition(&conds, fleet.DirectEndpointCondition)
	clear, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": conds}})
	if err != nil {
		t.Fatal(err)
	}
	if err := asAgent.Status().Patch(t.Context(), own, client.RawPatch(types.MergePatchType, clear)); !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "status.agent") {
		t.Fatalf("the agent cleared its Cluster's DirectEndpoint condition itself: %v", err)
	}

	// The fix the message offers: url set to a name of the certificate.
	updateCluster(t, ws, name, func(c *fleet.Cluster) {
		c.Spec.AgentDirectEndpoint.URL = "https://dev-1.example.com:30443"
	})
	testenv.Eventually(t, 30*time.Second, "DirectEndpoint gone once the url's host is covered", func() error {
		if cond := meta.FindStatusCondition(getCluster(t, ws, name).Status.Conditions, fleet.DirectEndpointCondition); cond != nil {
			return fmt.Errorf("DirectEndpoint condition %+v", cond)
		}
		return nil
	})
}

// clusterWarnings counts the Warning events with reason on Cluster ws/name
// whose message names host.
func clusterWarnings(t *testing.T, ws, name, reason, host string) int {
	t.Helper()
	list := &corev1.EventList{}
	if err := up.List(t.Context(), list, client.InNamespace(ws)); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range list.Items {
		if e.Type == corev1.EventTypeWarning && e.Reason == reason && e.InvolvedObject.Name == name && strings.Contains(e.Message, host) {
			n += max(1, int(e.Count))
		}
	}
	return n
}

// agentClient is a client of the upstream as the agent's request identity,
// from the credential the agent keeps downstream.
func agentClient(t *testing.T, agentNS string) client.Client {
	t.Helper()
	s, err := localSecret(t, env.Downstreams[0], agentNS, registration.AgentCredentialSecretName)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(s.Data[registration.KeyKubeconfig])
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: up.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
