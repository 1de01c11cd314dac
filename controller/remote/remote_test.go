package remote

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller/remote/remotetest"
	"github.com/gitops-fleet/fleet/controller/remote/restconfig"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/scheme"
)

// TestCacheGet_KubeconfigProblemsAreInputErrors: a kubeconfig restconfig
// refuses comes out of Get as an *InputError with restconfig's reason and
// message, so Classify reports it and the Cluster reconciler stalls on it.
func TestCacheGet_KubeconfigProblemsAreInputErrors(t *testing.T) {
	unsafe := remotetest.Kubeconfig(t, "http://10.0.0.1:6443", nil)
	for _, tc := range []struct {
		name       string
		kubeconfig []byte
		reason     string
	}{
		{"garbage", []byte("not yaml: ["), fleet.KubeConfigInvalidReason},
		{"no server", []byte("apiVersion: v1\nkind: Config\n"), fleet.KubeConfigInvalidReason},
		{"plain http", unsafe, fleet.KubeConfigUnsafeReason},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewCache(scheme.Scheme).Get(types.NamespacedName{Name: t.Name()}, tc.kubeconfig, config.InsecureKubeconfig{})
			_, want := restconfig.RESTConfig(tc.kubeconfig, config.InsecureKubeconfig{})
			var in *InputError
			if !errors.As(err, &in) || in.Reason != tc.reason || want == nil || err.Error() != want.Error() {
				t.Fatalf("got %v, want an InputError %s saying %v", err, tc.reason, want)
			}
		})
	}
}

// Classify goes by the errors' types: real failures of a client built from
// a kubeconfig, and API errors as the ssa manager wraps them.
func TestClassify_ByErrorType(t *testing.T) {
	tlsServer := httptest.NewTLSServer(http.NotFoundHandler())
	defer tlsServer.Close()
	closed := httptest.NewServer(http.NotFoundHandler())
	closedURL := strings.Replace(closed.URL, "http://", "https://", 1)
	closed.Close()

	get := func(t *testing.T, server string, ca []byte) error {
		t.Helper()
		rc, err := NewCache(scheme.Scheme).Get(types.NamespacedName{Name: t.Name()}, remotetest.Kubeconfig(t, server, ca), config.InsecureKubeconfig{})
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		return rc.Client.Get(ctx, client.ObjectKey{Name: "kube-system"}, &corev1.Namespace{})
	}
	gr := schema.GroupResource{Group: "apps", Resource: "deployments"}
	immutable := apierrors.NewInvalid(schema.GroupKind{Group: "apps", Kind: "Deployment"}, "fleet-agent",
		field.ErrorList{field.Invalid(field.NewPath("spec", "selector"), "x", apivalidation.FieldImmutableErrorMsg)})
	for _, tc := range []struct {
		name string
		err  func(t *testing.T) error
		want string
	}{
		{"server certificate not signed by the kubeconfig's CA", func(t *testing.T) error { return get(t, tlsServer.URL, remotetest.SelfSignedCA(t)) }, fleet.DownstreamTLSErrorReason},
		{"nobody listening", func(t *testing.T) error { return get(t, closedURL, remotetest.SelfSignedCA(t)) }, fleet.DownstreamUnreachableReason},
		{"x509 error, wrapped", func(*testing.T) error {
			return fmt.Errorf("applying: %w", &url.Error{Op: "Get", URL: "https://x", Err: x509.UnknownAuthorityError{}})
		}, fleet.DownstreamTLSErrorReason},
		{"TLS record from a non-TLS server", func(*testing.T) error {
			return fmt.Errorf("dial: %w", tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"})
		}, fleet.DownstreamTLSErrorReason},
		{"401", func(*testing.T) error { return apierrors.NewUnauthorized("no") }, fleet.DownstreamUnauthorizedReason},
		{"403", func(*testing.T) error { return apierrors.NewForbidden(gr, "fleet-agent", errors.New("no")) }, fleet.DownstreamForbiddenReason},
		{"field manager conflict", func(*testing.T) error {
			return fmt.Errorf("Deployment/x/fleet-agent apply failed: %w", apierrors.NewConflict(gr, "fleet-agent", errors.New("conflict with \"kubectl\"")))
		}, fleet.ApplyConflictReason},
		{"immutable field", func(*testing.T) error { return fmt.Errorf("Deployment/x/fleet-agent dry-run failed: %w", immutable) }, fleet.ApplyConflictReason},
		{"a kubeconfig problem", func(*testing.T) error {
			return &InputError{Reason: fleet.KubeConfigInvalidReason, Err: errors.New("bad")}
		}, fleet.KubeConfigInvalidReason},
		{"anything else", func(*testing.T) error { return errors.New("tls: x509: words are not types") }, fleet.ApplyFailedReason},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.err(t)
			if err == nil {
				t.Fatal("no error")
			}
			if reason, msg := Classify("https://downstream", err); reason != tc.want || msg == "" {
				t.Errorf("Classify(%v) = %s, want %s", err, reason, tc.want)
			}
		})
	}
}
