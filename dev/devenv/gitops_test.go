package devenv

import (
	"io"
	"log"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/gitserver"
	"github.com/gitops-fleet/fleet/gitops/decrypt"
	"github.com/gitops-fleet/fleet/gitops/decrypt/sopstest"
)

const fakeKubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: dev-1
  cluster:
    server: https://192.0.2.10:6443
    certificate-authority-data: Q0EtT0YtREVWLTE=
users:
- name: fleet
  user:
    client-key-data: S0VZLU9GLURFVi0x
contexts:
- name: dev-1
  context: {cluster: dev-1, user: fleet}
current-context: dev-1
`

// The demo and the e2e suite publish examples/gitops as its README tells a
// user to: the kubeconfig is in git only encrypted, the source component's
// decryption gives it back whole, and a redeployAgentGeneration bump is a
// one-line change in clear that still passes SOPS' integrity check
// (mac_only_encrypted), so the GitRepo deploys it.
func TestGitopsRepo_PublishesEncryptedAndBumpsInClear(t *testing.T) {
	log.SetOutput(io.Discard) // gitkit logs every request
	srv, err := gitserver.Start(gitserver.Options{Dir: t.TempDir(), Hosts: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	id := sopstest.NewIdentity(t)
	g := &GitopsRepo{Server: srv, Host: "127.0.0.1", Name: "fleet-clusters",
		Recipient: id.Recipient().String(), Identity: id.String()}

	if _, err := g.Publish("../../examples/gitops", map[string][]byte{"no-such-secret": []byte(fakeKubeconfig)}); err == nil ||
		!strings.Contains(err.Error(), `no Secret "no-such-secret"`) {
		t.Fatalf("a kubeconfig for a Secret the example lacks: want an error naming it, got %v", err)
	}
	if _, err := g.Publish("../../examples/gitops", map[string][]byte{"dev-1-kubeconfig": []byte(fakeKubeconfig)}); err != nil {
		t.Fatal(err)
	}
	const file = "clusters/dev-1.yaml"
	committed, err := srv.ReadFile("fleet-clusters.git", file)
	if err != nil {
		t.Fatal(err)
	}
	for _, clear := range []string{"192.0.2.10", "Q0EtT0YtREVWLTE=", "S0VZLU9GLURFVi0x", "PLACEHOLDER"} {
		if strings.Contains(string(committed), clear) {
			t.Errorf("%s holds %q in clear:\n%s", file, clear, committed)
		}
	}
	if _, err := srv.ReadFile("fleet-clusters.git", "fleet.yaml"); err != nil {
		t.Errorf("the repository lacks the example's fleet.yaml: %v", err)
	}

	keys, err := decrypt.KeysFromSecretData(map[string][]byte{"identity.agekey": []byte(g.Identity + "\n")})
	if err != nil {
		t.Fatal(err)
	}
	open := func(data []byte) (*fleet.Cluster, string) {
		t.Helper()
		r, err := decrypt.Decrypt([]decrypt.File{{Path: file, Data: data}}, keys)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Secrets) != 1 || len(r.Manifests) != 1 {
			t.Fatalf("decrypted %s: %s, want the Cluster and one Secret", file, r)
		}
		s := r.Secrets[0].Secret
		if s.Name != "dev-1-kubeconfig" || s.Namespace != "fleet-default" {
			t.Errorf("decrypted Secret %s/%s, want fleet-default/dev-1-kubeconfig", s.Namespace, s.Name)
		}
		c := &fleet.Cluster{}
		if err := yaml.Unmarshal(r.Manifests[0].Data, c); err != nil {
			t.Fatal(err)
		}
		return c, string(s.Data["value"]) + s.StringData["value"]
	}
	c, kc := open(committed)
	if kc != fakeKubeconfig {
		t.Errorf("decrypted kubeconfig differs:\n%s", kc)
	}
	if c.Name != "dev-1" || c.Spec.RedeployAgentGeneration != 1 {
		t.Errorf("Cluster %s at redeployAgentGeneration %d, want dev-1 at 1", c.Name, c.Spec.RedeployAgentGeneration)
	}

	gen, _, err := g.BumpRedeploy(file)
	if err != nil {
		t.Fatal(err)
	}
	bumped, err := srv.ReadFile("fleet-clusters.git", file)
	if err != nil {
		t.Fatal(err)
	}
	if changed := changedLines(string(committed), string(bumped)); gen != 2 || len(changed) != 1 || !strings.Contains(changed[0], "redeployAgentGeneration: 2") {
		t.Errorf("the bump to %d changed %q; want one line, redeployAgentGeneration: 2", gen, changed)
	}
	if c, _ := open(bumped); c.Spec.RedeployAgentGeneration != 2 {
		t.Errorf("after the bump the Cluster decrypts at redeployAgentGeneration %d, want 2", c.Spec.RedeployAgentGeneration)
	}
}

// changedLines are the lines of b that differ from a, line by line (the
// bump never adds or removes one).
func changedLines(a, b string) []string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	var out []string
	for i := range bl {
		if i >= len(al) || al[i] != bl[i] {
			out = append(out, bl[i])
		}
	}
	if len(al) != len(bl) {
		out = append(out, "(line count changed)")
	}
	return out
}
