package agent

import (
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"testing"
)

// An agent bootstrapped in system-store mode against a publicly trusted
// upstream has no CA in its credential; its session must trust the system
// store then, not demand a CA as strict mode does.
func TestNewSession_CredentialWithoutCAUsesTheSystemStore(t *testing.T) {
	a := &Agent{}
	s, err := a.newSession(t.Context(), &credential{APIServerURL: "https://127.0.0.1:1", Token: "t"})
	if err != nil {
		t.Fatalf("session for a credential without CA: %v", err)
	}
	if len(s.config.CAData) != 0 {
		t.Errorf("session pinned a CA %q; want the system store", s.config.CAData)
	}
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	s, err = a.newSession(t.Context(), &credential{APIServerURL: srv.URL, Token: "t", APIServerCA: ca})
	if err != nil {
		t.Fatal(err)
	}
	if string(s.config.CAData) != string(ca) {
		t.Errorf("session CA %q; want the credential's CA pinned", s.config.CAData)
	}
}
