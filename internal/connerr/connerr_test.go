package connerr_test

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/gitops-fleet/fleet/internal/connerr"
)

// TestIsUnreachable: errors of real requests that never got an answer are
// unreachable (refused, TLS); answers of an API server are not, except
// 503/504.
func TestIsUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	_, refused := http.Get("http://" + closed + "/api")

	srv := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	_, untrusted := http.Get(srv.URL) // the test server's CA is not trusted

	_, dns := http.Get("http://fleet-connerr-test.invalid/")

	gr := schema.GroupResource{Group: "fleet.cattle.io", Resource: "clusters"}
	for _, tc := range []struct {
		name        string
		err         error
		unreachable bool
		tls         bool
	}{
		{"connection refused", refused, true, false},
		{"wrapped connection refused", fmt.Errorf("reading the Secret: %w", refused), true, false},
		{"unknown certificate authority", untrusted, true, true},
		{"DNS", dns, true, false},
		{"401", apierrors.NewUnauthorized("token expired"), false, false},
		{"403", apierrors.NewForbidden(gr, "c", errors.New("no")), false, false},
		{"404", apierrors.NewNotFound(gr, "c"), false, false},
		{"503", apierrors.NewServiceUnavailable("not serving"), true, false},
		{"plain error", errors.New("invalid kubeconfig"), false, false},
		{"nil", nil, false, false},
	} {
		if tc.err == nil && tc.name != "nil" {
			t.Fatalf("%s: the request did not fail", tc.name)
		}
		if got := connerr.IsUnreachable(tc.err); got != tc.unreachable {
			t.Errorf("%s (%v): IsUnreachable %v, want %v", tc.name, tc.err, got, tc.unreachable)
		}
		if got := connerr.IsTLS(tc.err); got != tc.tls {
			t.Errorf("%s (%v): IsTLS %v, want %v", tc.name, tc.err, got, tc.tls)
		}
	}
}
