package v1alpha1_test

import (
	"encoding/json"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	proxyv1 "github.com/gitops-fleet/fleet/api/proxy/v1alpha1"
)

// The wire format is a contract with agents and CLIs of other releases: the
// JSON of each object, byte for byte, as the types in internal/direct made
// it before they moved here.
func TestWireFormat(t *testing.T) {
	exp := time.Date(2026, 12, 5, 1, 2, 3, 0, time.UTC)
	tm := func(kind string) metav1.TypeMeta { return metav1.TypeMeta{Kind: kind, APIVersion: proxyv1.APIVersion} }
	for _, c := range []struct {
		name string
		obj  any
		want string
	}{
		{"empty request", proxyv1.DirectTokenRequest{},
			`{"spec":{}}`},
		{"request", proxyv1.DirectTokenRequest{TypeMeta: tm(proxyv1.DirectTokenRequestKind),
			Spec: proxyv1.DirectTokenRequestSpec{ExpirationSeconds: 600, Credential: &proxyv1.Credential{Token: "t", ClientCertificate: "c"}}},
			`{"kind":"DirectTokenRequest","apiVersion":"proxy.fleet.cattle.io/v1alpha1","spec":{"expirationSeconds":600,"credential":{"token":"t","clientCertificate":"c"}}}`},
		{"token", proxyv1.DirectToken{TypeMeta: tm(proxyv1.DirectTokenKind), Status: proxyv1.DirectTokenStatus{Token: "x", ExpirationTimestamp: exp,
			Verbs: []string{"get"}, Endpoint: proxyv1.DirectEndpoint{URL: "https://a:8443", CABundle: "pem"}, LimitedBy: proxyv1.LimitedByCredential}},
			`{"kind":"DirectToken","apiVersion":"proxy.fleet.cattle.io/v1alpha1","status":{"token":"x","expirationTimestamp":"2026-12-05T01:02:03Z","verbs":["get"],"endpoint":{"url":"https://a:8443","caBundle":"pem"},"limitedBy":"credential"}}`},
		{"revocations", proxyv1.DirectTokenRevocations{TypeMeta: tm(proxyv1.DirectTokenRevocationsKind), Revoked: []proxyv1.RevokedToken{{ID: "j", Expiry: exp}}},
			`{"kind":"DirectTokenRevocations","apiVersion":"proxy.fleet.cattle.io/v1alpha1","revoked":[{"id":"j","expiry":"2026-12-05T01:02:03Z"}]}`},
	} {
		b, err := json.Marshal(c.obj)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, b, c.want)
		}
	}
	if got, want := proxyv1.TokenPath("ws", "c 1"), "/apis/proxy.fleet.cattle.io/v1alpha1/namespaces/ws/clusters/c%201/token"; got != want {
		t.Errorf("TokenPath = %s, want %s", got, want)
	}
	if got, want := proxyv1.RevocationsPath("ws", "c"), "/apis/proxy.fleet.cattle.io/v1alpha1/namespaces/ws/clusters/c/revocations"; got != want {
		t.Errorf("RevocationsPath = %s, want %s", got, want)
	}
}
