package controller_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller/rendererconn"
	"github.com/gitops-fleet/fleet/dev/controlplane"
	"github.com/gitops-fleet/fleet/dev/renderenv"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/renderservice"
	"github.com/gitops-fleet/fleet/internal/renderworker"
	"github.com/gitops-fleet/fleet/internal/scheme"
)

// TestBundle_RendererDownIsTheControllersTroubleNotTheBundles: while the
// renderer does not answer, a Bundle is Reconciling with reason
// RendererUnavailable and a message saying so, never Stalled (its author
// has nothing to fix), and nothing is deployed; once the renderer is back,
// the Bundle deploys without anyone touching it.
func TestBundle_RendererDownIsTheControllersTroubleNotTheBundles(t *testing.T) {
	r := rendererProcess.Load()
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	restarted := false
	restart := func() {
		if restarted {
			return
		}
		restarted = true
		r, err := renderenv.StartFromSecret(t.Context(), up, config.DefaultSystemNamespace, renderservice.SecretName, rendererAddr, renderenv.Options{Dir: rendererDir})
		if err != nil {
			t.Fatalf("restarting the renderer: %v", err)
		}
		rendererProcess.Store(r)
	}
	t.Cleanup(restart)

	ws := testenv.Namespace(t, up, "fleet-renderer-down-")
	newCluster(t, ws, "c1", map[string]string{"env": "prod"})
	b := webBundle(ws)
	if err := up.Create(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "Reconciling RendererUnavailable", func() error {
		if err := up.Get(t.Context(), client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		rc := meta.FindStatusCondition(b.Status.Conditions, fleet.ReconcilingCondition)
		if rc == nil || rc.Status != metav1.ConditionTrue || rc.Reason != fleet.RendererUnavailableReason {
			return fmt.Errorf("conditions %+v", b.Status.Conditions)
		}
		for _, want := range []string{"the renderer (https://" + rendererAddr + "/v1/render) is unavailable", "the Bundle is not at fault"} {
			if !strings.Contains(rc.Message, want) {
				return fmt.Errorf("message %q lacks %q", rc.Message, want)
			}
		}
		return nil
	})
	if s := meta.FindStatusCondition(b.Status.Conditions, fleet.StalledCondition); s != nil && s.Status == metav1.ConditionTrue {
		t.Errorf("Stalled while the renderer is down: %+v", s)
	}
	if got := deployedTo(t, ws, "web"); len(got) != 0 {
		t.Errorf("deployed to %v without a render", got)
	}

	restart()
	testenv.Eventually(t, 2*time.Minute, "web deployed once the renderer is back", func() error {
		if got := deployedTo(t, ws, "web"); len(got) != 1 {
			return fmt.Errorf("deployed to %v", got)
		}
		return nil
	})
	if got := content(t, ws, "c1", "web"); !strings.Contains(got, "team: web") {
		t.Errorf("content:\n%s", got)
	}
}

// TestRendererSecret_TheControllerKeepsTheRenderersCredentials: the
// controller made Secret fleet-renderer-tls (the suite's renderer started
// from it), with a certificate for the renderer's address and the token's
// hash beside the token; a Keeper (as the controller's identity) makes
// such a Secret when missing, remakes a broken one and renews a
// certificate that no longer covers the address, keeping the token.
func TestRendererSecret_TheControllerKeepsTheRenderersCredentials(t *testing.T) {
	s := &corev1.Secret{}
	if err := up.Get(t.Context(), client.ObjectKey{Namespace: config.DefaultSystemNamespace, Name: renderservice.SecretName}, s); err != nil {
		t.Fatal(err)
	}
	creds, err := renderservice.CredentialsFromSecretData(s.Data)
	if err != nil {
		t.Fatal(err)
	}
	host, _, _ := strings.Cut(rendererAddr, ":")
	if why := creds.Renewal(host, time.Now()); why != "" {
		t.Errorf("the controller's Secret: %s", why)
	}

	asController, err := client.New(controllerIdentity, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	ns := testenv.Namespace(t, up, "fleet-renderer-secret-")
	k := &rendererconn.Keeper{Client: asController, Reader: asController, Namespace: ns, Name: "renderer-creds", Host: "fleet-renderer." + ns + ".svc"}
	first, err := k.Credentials(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKey{Namespace: ns, Name: "renderer-creds"}
	stored := func() *renderservice.Credentials {
		t.Helper()
		s := &corev1.Secret{}
		if err := up.Get(t.Context(), key, s); err != nil {
			t.Fatal(err)
		}
		c, err := renderservice.CredentialsFromSecretData(s.Data)
		if err != nil {
			t.Fatalf("the Secret the keeper wrote: %v", err)
		}
		return c
	}
	if got := stored(); got.Token != first.Token || got.Renewal(k.Host, time.Now()) != "" {
		t.Errorf("made: token kept %v, renewal %q", got.Token == first.Token, got.Renewal(k.Host, time.Now()))
	}

	// The renderer's address changes: a new certificate, the same token,
	// the previous CA still trusted.
	k2 := &rendererconn.Keeper{Client: asController, Reader: asController, Namespace: ns, Name: "renderer-creds", Host: "renderer.example.internal"}
	renewed, err := k2.Credentials(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got := stored(); got.Token != first.Token || got.Renewal("renderer.example.internal", time.Now()) != "" || !bytes.Contains(got.CA, bytes.TrimSpace(first.CA)) || bytes.Equal(renewed.Cert, first.Cert) {
		t.Errorf("renewed for a new host: token kept %v, renewal %q", got.Token == first.Token, got.Renewal("renderer.example.internal", time.Now()))
	}

	// Broken by hand: made again, with a new token.
	s = &corev1.Secret{}
	if err := up.Get(t.Context(), key, s); err != nil {
		t.Fatal(err)
	}
	s.Data[renderservice.KeyKey] = []byte("not a key")
	if err := up.Update(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	k2.Refused()
	if _, err := k2.Credentials(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := stored(); got.Token == first.Token {
		t.Error("a broken Secret was repaired with the previous token")
	}
}

// TestRenderer_ReachedThroughTheReadyEndpointsOfItsService: a renderer URL
// naming a Service (fleet-renderer.<namespace>.svc) is reached through the
// Service's ready EndpointSlice endpoints, listed with the controller's own
// rights, without cluster DNS: renders spread over the replicas, a
// not-ready endpoint is never dialled, and a replica that stops leaves the
// others rendering.
func TestRenderer_ReachedThroughTheReadyEndpointsOfItsService(t *testing.T) {
	host, err := controlplane.AggregatedServerHost() // EndpointSlices refuse loopback
	if err != nil {
		t.Skip(err)
	}
	ns := config.DefaultSystemNamespace
	service := "fleet-renderer"
	name := service + "." + ns + ".svc"
	creds, err := renderservice.NewCredentials(name)
	if err != nil {
		t.Fatal(err)
	}
	var replicas []*renderenv.Renderer
	for i := range 2 {
		addr, err := renderenv.FreeAddress(host)
		if err != nil {
			t.Fatal(err)
		}
		r, err := renderenv.Start(t.Context(), addr, creds, renderenv.Options{Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Stop() })
		replicas = append(replicas, r)
		_, port, _ := net.SplitHostPort(addr)
		mkSlice(t, ns, fmt.Sprintf("%s-test-%d", service, i), service, host, port, true)
	}
	// Behind the not-ready one, a listener that counts connections.
	notReady, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = notReady.Close() })
	var dialled atomic.Int32
	go func() {
		for {
			conn, err := notReady.Accept()
			if err != nil {
				return
			}
			dialled.Add(1)
			_ = conn.Close()
		}
	}()
	_, notReadyPort, _ := net.SplitHostPort(notReady.Addr().String())
	mkSlice(t, ns, service+"-test-not-ready", service, host, notReadyPort, false)

	asController, err := client.New(controllerIdentity, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	endpoints := rendererconn.EndpointsOf(asController, name)
	if endpoints == nil {
		t.Fatalf("%s names no Service", name)
	}
	limits := renderworker.LimitsOf(&config.Config{})
	limits.Timeout, limits.Concurrency = 30*time.Second, 4
	c, err := renderservice.NewClient("https://"+name+":8443", renderservice.StaticCredentials{C: creds}, endpoints, func() renderworker.Limits { return limits })
	if err != nil {
		t.Fatal(err)
	}
	b := webBundle("ws")
	renderAll := func(n int) {
		t.Helper()
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				out, err := c.Render(t.Context(), b.Name, b.Spec.Resources, b.Spec.BundleDeploymentOptions)
				if err != nil || !strings.Contains(string(out.YAML), "team: web") {
					t.Errorf("render: %v", err)
				}
			})
		}
		wg.Wait()
	}
	renderAll(4)
	for i, r := range replicas {
		if !strings.Contains(r.LogTail(), "rendered") {
			t.Errorf("replica %d rendered nothing: renders did not spread over the endpoints\n%s", i, r.LogTail())
		}
	}
	if err := replicas[0].Stop(); err != nil {
		t.Fatal(err)
	}
	renderAll(4)
	if n := dialled.Load(); n != 0 {
		t.Errorf("the not-ready endpoint was dialled %d times", n)
	}
}

func mkSlice(t *testing.T, ns, name, service, host, port string, ready bool) {
	t.Helper()
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: service}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(int32(p))}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{host}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready)}}},
	}
	if err := up.Create(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = up.Delete(context.Background(), s) })
}
