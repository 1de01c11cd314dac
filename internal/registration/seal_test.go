package registration

import (
	"bytes"
	"testing"
)

func TestSeal_OnlyTheRegisteringKeyOpensAndOnlyForItsRegistration(t *testing.T) {
	agent, err := NewCredentialKey()
	if err != nil {
		t.Fatal(err)
	}
	other, _ := NewCredentialKey()
	pub, err := ParseCredentialPublicKey(agent.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	want := SealedCredential{Token: "bearer-secret-0123456789", ClusterNamespace: "ws", ClusterName: "c1",
		DeploymentNamespace: "cluster-ws-c1", ServiceAccount: "request-x", Expires: "2026-12-02T00:00:00Z"}
	sealed, err := Seal(pub, want, "ws", "request-x", "uid-1")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, []byte(want.Token)) || bytes.Contains(sealed, []byte(want.ClusterName)) {
		t.Fatal("the sealed bytes carry the credential in the clear")
	}
	got, err := agent.Open(sealed, "ws", "request-x", "uid-1")
	if err != nil {
		t.Fatal(err)
	}
	if *got != want {
		t.Errorf("opened %+v, want %+v", got, want)
	}
	for name, open := range map[string]func() error{
		"another key":                 func() error { _, err := other.Open(sealed, "ws", "request-x", "uid-1"); return err },
		"another registration's name": func() error { _, err := agent.Open(sealed, "ws", "request-y", "uid-1"); return err },
		"a registration made again":   func() error { _, err := agent.Open(sealed, "ws", "request-x", "uid-2"); return err },
		"another workspace":           func() error { _, err := agent.Open(sealed, "ws2", "request-x", "uid-1"); return err },
		"a flipped bit": func() error {
			b := bytes.Clone(sealed)
			b[len(b)-1] ^= 1
			_, err := agent.Open(b, "ws", "request-x", "uid-1")
			return err
		},
		"nothing": func() error { _, err := agent.Open(nil, "ws", "request-x", "uid-1"); return err },
	} {
		if open() == nil {
			t.Errorf("%s opened the sealed credential", name)
		}
	}
	for _, bad := range []string{"", "not base64!", "AAAA"} {
		if _, err := ParseCredentialPublicKey(bad); err == nil {
			t.Errorf("ParseCredentialPublicKey(%q) accepted it", bad)
		}
	}
}
