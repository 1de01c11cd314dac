package agent_test

import (
	"context"
	"crypto/x509"
	"errors"
	"net"
	"net/url"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/gitops-fleet/fleet/agent"
	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/testenv"
)

// TestAgent_RegistrationCreateWithoutAnAnswerIsMadeAgainWithTheSameName:
// a create of the registration that got no answer (the upstream wrote it
// but the answer was lost; the upstream too busy: 429) is made again with
// the same name, so exactly one registration exists; a refusal or an
// untrusted upstream certificate is not retried.
func TestAgent_RegistrationCreateWithoutAnAnswerIsMadeAgainWithTheSameName(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-ws-")
	ds := env.Downstreams[0]
	agentNS := testenv.Namespace(t, ds.Client, "agent-")
	g := int64(0)
	a, err := agent.New(agent.Options{Local: ds.Config, Namespace: agentNS, PodName: "agent-" + agentNS, Generation: &g, RegistrationTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	base, err := client.NewWithWatch(env.Upstream.Config, client.Options{Scheme: up.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	reg := func(name string) *fleet.ClusterRegistration {
		return &fleet.ClusterRegistration{
			ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: name},
			Spec:       fleet.ClusterRegistrationSpec{ClientID: "retry-" + ws, ClientRandom: strings.Repeat("r", 48)},
		}
	}
	count := func() int {
		list := &fleet.ClusterRegistrationList{}
		if err := up.List(t.Context(), list, client.InNamespace(ws)); err != nil {
			t.Fatal(err)
		}
		return len(list.Items)
	}
	gr := schema.GroupResource{Group: fleet.GroupVersion.Group, Resource: "clusterregistrations"}
	for _, tc := range []struct {
		name string
		// first answers the first create; it may pass it on to the
		// upstream first.
		first func(ctx context.Context, c client.WithWatch, obj client.Object) error
	}{
		{"written, answer lost", func(ctx context.Context, c client.WithWatch, obj client.Object) error {
			if err := c.Create(ctx, obj); err != nil {
				return err
			}
			return &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
		}},
		{"too busy", func(context.Context, client.WithWatch, client.Object) error {
			return apierrors.NewTooManyRequests("the server has received too many requests", 1)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := count()
			var calls atomic.Int32
			c := interceptor.NewClient(base, interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
				if calls.Add(1) == 1 {
					return tc.first(ctx, c, obj)
				}
				return c.Create(ctx, obj, opts...)
			}})
			name := "request-" + strings.NewReplacer(" ", "-", ",", "").Replace(tc.name)
			if err := a.CreateRegistration(t.Context(), c, reg(name)); err != nil {
				t.Fatal(err)
			}
			if n := calls.Load(); n != 2 {
				t.Errorf("%d creates, want 2", n)
			}
			if n := count() - before; n != 1 {
				t.Errorf("%d registrations made, want 1", n)
			}
			if err := up.Get(t.Context(), client.ObjectKey{Namespace: ws, Name: name}, &fleet.ClusterRegistration{}); err != nil {
				t.Errorf("the registration %s: %v", name, err)
			}
		})
	}

	for _, tc := range []struct {
		name   string
		answer error
	}{
		{"refused", apierrors.NewForbidden(gr, "x", errors.New("no"))},
		{"upstream certificate not trusted", &url.Error{Op: "Post", URL: env.Upstream.Config.Host, Err: x509.UnknownAuthorityError{}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int32
			c := interceptor.NewClient(base, interceptor.Funcs{Create: func(context.Context, client.WithWatch, client.Object, ...client.CreateOption) error {
				calls.Add(1)
				return tc.answer
			}})
			if err := a.CreateRegistration(t.Context(), c, reg("request-answered")); !errors.Is(err, tc.answer) {
				t.Errorf("got %v, want %v", err, tc.answer)
			}
			if n := calls.Load(); n != 1 {
				t.Errorf("%d creates, want 1: the same request would fail the same way", n)
			}
		})
	}
}
