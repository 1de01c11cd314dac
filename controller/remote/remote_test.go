package remote

import (
	"strings"
	"testing"
)

const kubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://10.0.0.1:6443", certificate-authority-data: Y2E=}
users:
- name: u
  user: {token: t1}
contexts:
- name: c
  context: {cluster: c, user: u}
current-context: c
`

func TestServerHash_IgnoresCredentialsButNotTheServer(t *testing.T) {
	a, err := ServerHash([]byte(kubeconfig))
	if err != nil {
		t.Fatal(err)
	}
	rotated, _ := ServerHash([]byte(strings.Replace(kubeconfig, "token: t1", "token: t2", 1)))
	moved, _ := ServerHash([]byte(strings.Replace(kubeconfig, "10.0.0.1", "10.0.0.2", 1)))
	newCA, _ := ServerHash([]byte(strings.Replace(kubeconfig, "Y2E=", "Y2I=", 1)))
	if a != rotated {
		t.Error("a credential rotation changed the server hash: it would redeploy the agent")
	}
	if a == moved || a == newCA {
		t.Error("a new server or CA did not change the server hash")
	}
}

func TestRESTConfig_RejectsGarbageAsInputError(t *testing.T) {
	for _, in := range []string{"", "not yaml: [", "apiVersion: v1\nkind: Config\n"} {
		_, err := RESTConfig([]byte(in))
		if _, ok := err.(*InputError); !ok {
			t.Errorf("%q: want an InputError, got %v", in, err)
		}
	}
}

// FuzzServerHash: kubeconfig Secrets are untrusted input; parsing must never
// panic.
func FuzzServerHash(f *testing.F) {
	f.Add([]byte(kubeconfig))
	f.Add([]byte("clusters: [{cluster: {server: ':::'}}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = ServerHash(data)
	})
}
