package review

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gitops-fleet/fleet/gitops/decrypt/sopstest"
)

// encryptInTree encrypts a file of a copied tree as the README says (only
// Secrets' values), after replacing old with new in it.
func encryptInTree(t *testing.T, dir, rel, recipient string, edits ...[2]string) {
	t.Helper()
	p := filepath.Join(dir, rel)
	plain, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range edits {
		if !bytes.Contains(plain, []byte(e[0])) {
			t.Fatalf("%s has no %q", rel, e[0])
		}
		plain = bytes.Replace(plain, []byte(e[0]), []byte(e[1]), 1)
	}
	if err := os.WriteFile(p, sopstest.Encrypt(t, rel, plain, sopstest.ValuesOfSecrets, recipient), 0o644); err != nil {
		t.Fatal(err)
	}
}

func reportText(t *testing.T, r *Report) string {
	t.Helper()
	var b bytes.Buffer
	if err := r.Text(&b); err != nil {
		t.Fatal(err)
	}
	if err := r.Markdown(&b); err != nil {
		t.Fatal(err)
	}
	if err := r.JSON(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// The README's SOPS step encrypts clusters/dev-1.yaml in place: the
// Cluster in the same file gets the file's sops metadata too. fleet diff
// reads the Cluster as it is, says the Secret is encrypted, and shows
// neither ciphertext nor the sops metadata, on encryption and on a change
// of the encrypted kubeconfig alike.
func TestDiff_SOPSEncryptedKubeconfigIsMaskedNotABlob(t *testing.T) {
	id := sopstest.NewIdentity(t)
	encryptedHead := copyTree(t, nil)
	encryptInTree(t, encryptedHead, "clusters/dev-1.yaml", id.Recipient().String())

	r := diff(t, encryptedHead)
	if r.Changed() || len(touched(r)) > 0 {
		t.Errorf("encrypting the kubeconfig in place changed %v", touched(r))
	}
	if !strings.Contains(strings.Join(r.Notes, "\n"), "fleet-default/dev-1-kubeconfig is encrypted (SOPS)") {
		t.Errorf("no note that the kubeconfig is encrypted: %q", r.Notes)
	}

	// A pull request that changes the encrypted kubeconfig (another token)
	// and bumps the Cluster: the bump shows, the Secret's values never do.
	changedHead := copyTree(t, nil)
	encryptInTree(t, changedHead, "clusters/dev-1.yaml", id.Recipient().String(),
		[2]string{"PLACEHOLDER-token-with-cluster-admin-rights-on-dev-1", "tok-changed-in-the-pull-request"},
		[2]string{"redeployAgentGeneration: 1", "redeployAgentGeneration: 2"})
	b, err := Load(encryptedHead, "base", "config/fleet-controller.yaml")
	if err != nil {
		t.Fatal(err)
	}
	h, err := Load(changedHead, "head", "config/fleet-controller.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r, err = Diff(b, h)
	if err != nil {
		t.Fatal(err)
	}
	if got := touched(r); len(got) != 1 || got[0] != "fleet-default/dev-1" {
		t.Errorf("touched %v, want the bumped dev-1 only", got)
	}
	for _, report := range []string{reportText(t, diff(t, encryptedHead)), reportText(t, r)} {
		for _, leak := range []string{"ENC[AES256_GCM", "tok-changed-in-the-pull-request", "PLACEHOLDER-token", "lastmodified", id.Recipient().String()} {
			if strings.Contains(report, leak) {
				t.Errorf("the report shows %q:\n%s", leak, report)
			}
		}
	}
}

// Encrypted values anywhere but in a Secret are refused with the object's
// name, as the source component refuses them.
func TestDiff_SOPSEncryptedClusterFieldIsRefused(t *testing.T) {
	id := sopstest.NewIdentity(t)
	head := copyTree(t, nil)
	p := filepath.Join(head, "clusters/dev-1.yaml")
	plain, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	enc := sopstest.Encrypt(t, "clusters/dev-1.yaml", plain, sopstest.Rules{EncryptedRegex: "^(kubeConfigSecret|stringData)$"}, id.Recipient().String())
	if err := os.WriteFile(p, enc, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Load(head, "head", "config/fleet-controller.yaml")
	if err == nil || !strings.Contains(err.Error(), "Cluster fleet-default/dev-1 holds SOPS-encrypted values") {
		t.Fatalf("want a refusal naming the Cluster, got %v", err)
	}
}
