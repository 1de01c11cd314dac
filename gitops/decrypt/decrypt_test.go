package decrypt

import (
	"bytes"
	"encoding/base64"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/gitops/decrypt/sopstest"
	"github.com/gitops-fleet/fleet/internal/strictyaml"
)

// A kubeconfig as a user commits it (the token is the secret part).
const kubeconfig = `apiVersion: v1
kind: Config
clusters:
  - name: dev-1
    cluster:
      server: https://dev-1.example.test:6443
      certificate-authority-data: ZmFrZS1jYQ==
users:
  - name: fleet
    user:
      token: tok-3c1a9f0e-not-a-real-token
contexts:
  - name: dev-1
    context:
      cluster: dev-1
      user: fleet
current-context: dev-1
`

const token = "tok-3c1a9f0e-not-a-real-token"

// kubeconfigSecret is the design card's file: a Cluster and its kubeconfig
// Secret, in one file.
func kubeconfigFile() []byte {
	var b strings.Builder
	b.WriteString(`apiVersion: fleet.cattle.io/v1alpha1
kind: Cluster
metadata:
    name: dev-1
    namespace: fleet-default
    labels:
        env: dev
spec:
    kubeConfigSecret: dev-1-kubeconfig
---
apiVersion: v1
kind: Secret
metadata:
    name: dev-1-kubeconfig
    namespace: fleet-default
type: Opaque
stringData:
    value: |
`)
	for _, l := range strings.SplitAfter(strings.TrimSuffix(kubeconfig, "\n"), "\n") {
		b.WriteString("        " + l)
	}
	b.WriteString("\n")
	return []byte(b.String())
}

// kubeconfigRules are the README's: only the Secret's values.
var kubeconfigRules = sopstest.ValuesOfSecrets

func decryptOne(t *testing.T, f File, k *Keys) *Result {
	t.Helper()
	r, err := Decrypt([]File{f}, k)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestDecrypt_KubeconfigSecretEqualsTheOriginalByteForByte(t *testing.T) {
	id := newIdentity(t)
	plain := kubeconfigFile()
	enc := encryptFor(t, "clusters/dev-1.yaml", plain, kubeconfigRules, id.Recipient().String())
	if bytes.Contains(enc, []byte(token)) || bytes.Contains(enc, []byte("certificate-authority-data")) {
		t.Fatalf("the encrypted file holds the kubeconfig:\n%s", enc)
	}
	if !Encrypted(File{Path: "clusters/dev-1.yaml", Data: enc}) || Encrypted(File{Path: "clusters/dev-1.yaml", Data: plain}) {
		t.Fatal("Encrypted does not tell the SOPS file from the plain one")
	}

	r := decryptOne(t, File{Path: "clusters/dev-1.yaml", Data: enc}, keysOf(t, id))

	if len(r.Secrets) != 1 {
		t.Fatalf("want the kubeconfig Secret, got %d Secrets", len(r.Secrets))
	}
	s := r.Secrets[0]
	if s.Path != "clusters/dev-1.yaml" || s.Secret.Name != "dev-1-kubeconfig" || s.Secret.Namespace != "fleet-default" {
		t.Fatalf("wrong Secret: %s %s/%s", s.Path, s.Secret.Namespace, s.Secret.Name)
	}
	if got := s.Secret.StringData["value"]; got != kubeconfig {
		t.Fatalf("decrypted kubeconfig differs from the original:\n%s", cmp.Diff(kubeconfig, got))
	}
	// The whole Secret document equals the committed one.
	var want, got map[string]any
	docs := strings.SplitN(string(plain), "---\n", 2)
	if err := yaml.Unmarshal([]byte(docs[1]), &want); err != nil {
		t.Fatal(err)
	}
	js, _ := yaml.Marshal(s.Secret)
	if err := yaml.Unmarshal(js, &got); err != nil {
		t.Fatal(err)
	}
	delete(got["metadata"].(map[string]any), "creationTimestamp")
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("decrypted Secret differs (-committed +decrypted):\n%s", d)
	}

	// The Cluster beside it goes into the Bundle, without sops metadata.
	if len(r.Manifests) != 1 {
		t.Fatalf("want the Cluster as the one manifest, got %d", len(r.Manifests))
	}
	c := &fleet.Cluster{}
	if err := strictyaml.Unmarshal(r.Manifests[0].Data, c); err != nil {
		t.Fatalf("the Cluster does not decode strictly (sops metadata left?): %v\n%s", err, r.Manifests[0].Data)
	}
	if c.Name != "dev-1" || c.Spec.KubeConfigSecret != "dev-1-kubeconfig" || c.Labels["env"] != "dev" {
		t.Fatalf("Cluster changed: %+v", c)
	}
	if strings.Contains(r.String(), token) {
		t.Fatal("printing a Result shows a value")
	}
}

func TestDecrypt_DataBytesRoundTrip(t *testing.T) {
	id := newIdentity(t)
	raw := []byte("\x00\x01binary\xffkey material\n")
	plain := []byte("apiVersion: v1\nkind: Secret\nmetadata:\n  name: bin\ndata:\n  key: " + base64.StdEncoding.EncodeToString(raw) + "\n  kubeconfig: " + base64.StdEncoding.EncodeToString([]byte(kubeconfig)) + "\n")
	enc := encryptFor(t, "s.yaml", plain, sopsDefault, id.Recipient().String())
	r := decryptOne(t, File{Path: "s.yaml", Data: enc}, keysOf(t, id))
	if len(r.Secrets) != 1 || len(r.Manifests) != 0 {
		t.Fatalf("want one Secret and no manifest, got %d and %d", len(r.Secrets), len(r.Manifests))
	}
	d := r.Secrets[0].Secret.Data
	if !bytes.Equal(d["key"], raw) || !bytes.Equal(d["kubeconfig"], []byte(kubeconfig)) {
		t.Fatalf("data differs after the round trip")
	}
}

func TestDecrypt_JSONFile(t *testing.T) {
	id := newIdentity(t)
	plain := []byte(`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"j"},"stringData":{"password":"pw-4b1d"}}`)
	enc := encryptFor(t, "secret.json", plain, sopsDefault, id.Recipient().String())
	if bytes.Contains(enc, []byte("pw-4b1d")) {
		t.Fatal("not encrypted")
	}
	r := decryptOne(t, File{Path: "secret.json", Data: enc}, keysOf(t, id))
	if len(r.Secrets) != 1 || r.Secrets[0].Secret.StringData["password"] != "pw-4b1d" {
		t.Fatalf("JSON Secret not decrypted: %d Secrets", len(r.Secrets))
	}
}

func TestDecrypt_PartialEncryptionAsSOPSWritesIt(t *testing.T) {
	id := newIdentity(t)
	plain := []byte(`apiVersion: v1
kind: Secret
metadata:
    name: app
stringData:
    password: pw-77aa
    owner_unencrypted: team-payments
`)
	for name, r := range map[string]rules{
		"unencrypted_suffix":           sopsDefault,
		"encrypted_regex":              {EncryptedRegex: "^password$"},
		"encrypted_regex+mac_only_enc": {EncryptedRegex: "^password$", MACOnlyEncrypted: true},
	} {
		t.Run(name, func(t *testing.T) {
			enc := encryptFor(t, "app.yaml", plain, r, id.Recipient().String())
			if bytes.Contains(enc, []byte("pw-77aa")) || !bytes.Contains(enc, []byte("team-payments")) {
				t.Fatalf("not partially encrypted:\n%s", enc)
			}
			res := decryptOne(t, File{Path: "app.yaml", Data: enc}, keysOf(t, id))
			sd := res.Secrets[0].Secret.StringData
			if sd["password"] != "pw-77aa" || sd["owner_unencrypted"] != "team-payments" {
				t.Fatalf("wrong values after decryption: %d keys", len(sd))
			}
		})
	}
}

func TestDecrypt_AnyOfSeveralIdentitiesAndRecipients(t *testing.T) {
	a, b, other := newIdentity(t), newIdentity(t), newIdentity(t)
	enc := encryptFor(t, "s.yaml", kubeconfigFile(), kubeconfigRules, other.Recipient().String(), b.Recipient().String())
	// The Secret holds a (unrelated) and b (a recipient): b opens it.
	r := decryptOne(t, File{Path: "s.yaml", Data: enc}, keysOf(t, a, b))
	if r.Secrets[0].Secret.StringData["value"] != kubeconfig {
		t.Fatal("not decrypted with the second identity")
	}
}

// noKeyMaterial fails when an error shows a private key or a value.
func noKeyMaterial(t *testing.T, err error, secrets ...string) {
	t.Helper()
	for _, s := range append(secrets, "AGE-SECRET-KEY") {
		if strings.Contains(err.Error(), s) {
			t.Fatalf("the error shows secret material %q: %v", s, err)
		}
	}
}

func TestDecrypt_WrongKeyNamesFileAndRecipients(t *testing.T) {
	right, wrong := newIdentity(t), newIdentity(t)
	enc := encryptFor(t, "clusters/dev-1.yaml", kubeconfigFile(), kubeconfigRules, right.Recipient().String())
	_, err := Decrypt([]File{{Path: "clusters/dev-1.yaml", Data: enc}}, keysOf(t, wrong))
	if err == nil {
		t.Fatal("decrypted with the wrong key")
	}
	for _, want := range []string{"clusters/dev-1.yaml", right.Recipient().String(), wrong.Recipient().String(), ".agekey"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q: %v", want, err)
		}
	}
	noKeyMaterial(t, err, token)
}

func TestDecrypt_NoDecryptionSecret(t *testing.T) {
	id := newIdentity(t)
	enc := encryptFor(t, "s.yaml", kubeconfigFile(), kubeconfigRules, id.Recipient().String())
	_, err := Decrypt([]File{{Path: "s.yaml", Data: enc}, {Path: "plain.yaml", Data: []byte("kind: ConfigMap\n")}}, nil)
	if err == nil || !strings.Contains(err.Error(), "spec.decryption") || !strings.Contains(err.Error(), id.Recipient().String()) {
		t.Fatalf("want an error naming spec.decryption and the recipient, got %v", err)
	}
}

// encValue matches one SOPS-encrypted value.
var encValue = regexp.MustCompile(`ENC\[AES256_GCM,data:([^,]+),iv:([^,]+),tag:([^,]+),type:str\]`)

func TestDecrypt_TamperedValueIsRefused(t *testing.T) {
	id := newIdentity(t)
	plain := []byte("apiVersion: v1\nkind: Secret\nmetadata:\n    name: app\nstringData:\n    password: pw-1\n    other: pw-2\n")
	enc := encryptFor(t, "app.yaml", plain, kubeconfigRules, id.Recipient().String())
	m := encValue.FindAllSubmatch(enc, -1)
	if len(m) != 3 {
		t.Fatalf("want 2 encrypted values and the MAC, found %d", len(m))
	}
	cases := map[string][]byte{
		// One bit of the ciphertext flipped: AES-GCM's tag fails.
		"flipped ciphertext": bytes.Replace(enc, m[0][1], flip(m[0][1]), 1),
		// A value moved to another key: its path is authenticated data.
		"swapped values": bytes.Replace(bytes.Replace(enc, m[0][0], []byte("SWAP"), 1), m[1][0], m[0][0], 1),
		// A value written in clear where SOPS expects ciphertext.
		"clear value": bytes.Replace(enc, m[0][0], []byte("pw-in-clear"), 1),
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			if name == "swapped values" {
				data = bytes.Replace(data, []byte("SWAP"), m[1][0], 1)
			}
			_, err := Decrypt([]File{{Path: "app.yaml", Data: data}}, keysOf(t, id))
			if err == nil || !strings.Contains(err.Error(), "app.yaml") {
				t.Fatalf("tampered file accepted or error without the file: %v", err)
			}
			noKeyMaterial(t, err, "pw-1", "pw-2", "pw-in-clear")
		})
	}
}

func flip(b64 []byte) []byte {
	raw, err := base64.StdEncoding.DecodeString(string(b64))
	if err != nil {
		panic(err)
	}
	raw[0] ^= 1
	return []byte(base64.StdEncoding.EncodeToString(raw))
}

func TestDecrypt_TamperedMACOrClearFieldIsRefused(t *testing.T) {
	id := newIdentity(t)
	enc := encryptFor(t, "clusters/dev-1.yaml", kubeconfigFile(), kubeconfigRules, id.Recipient().String())
	mac := regexp.MustCompile(`mac: ENC\[AES256_GCM,data:([^,]+),`).FindSubmatch(enc)
	if mac == nil {
		t.Fatalf("no mac in\n%s", enc)
	}
	cases := map[string][]byte{
		"mac changed": bytes.Replace(enc, mac[1], flip(mac[1]), 1),
		// Unencrypted fields are covered by the MAC too: a reviewer cannot
		// be shown one Cluster while another is deployed.
		"clear field changed": bytes.Replace(enc, []byte("env: dev"), []byte("env: prod"), 1),
		"secret renamed":      bytes.Replace(enc, []byte("name: dev-1-kubeconfig"), []byte("name: other-kubeconfig"), 1),
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			if bytes.Equal(data, enc) {
				t.Fatal("the edit did not apply")
			}
			_, err := Decrypt([]File{{Path: "clusters/dev-1.yaml", Data: data}}, keysOf(t, id))
			if err == nil || !strings.Contains(err.Error(), "clusters/dev-1.yaml") {
				t.Fatalf("tampered file accepted or error without the file: %v", err)
			}
			if !strings.Contains(err.Error(), "integrity") && !strings.Contains(err.Error(), "cannot be decrypted") {
				t.Fatalf("error does not say what is wrong: %v", err)
			}
			noKeyMaterial(t, err, token)
		})
	}
}

func TestDecrypt_EncryptedNonSecretIsRefused(t *testing.T) {
	id := newIdentity(t)
	plain := []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n    name: settings\ndata:\n    dsn: postgres://u:pw-9c@db/app\n")
	enc := encryptFor(t, "cm.yaml", plain, kubeconfigRules, id.Recipient().String())
	_, err := Decrypt([]File{{Path: "cm.yaml", Data: enc}}, keysOf(t, id))
	if err == nil {
		t.Fatal("an encrypted ConfigMap was decrypted into the Bundle's manifests")
	}
	for _, want := range []string{"cm.yaml", "ConfigMap", "settings", "only Secrets"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q: %v", want, err)
		}
	}
	noKeyMaterial(t, err, "pw-9c")
}

func TestDecrypt_PlainFilesPassUnchanged(t *testing.T) {
	id := newIdentity(t)
	files := []File{
		{Path: "deploy.yaml", Data: []byte("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web # a comment about sops\n")},
		{Path: "values.yaml", Data: []byte("sops: not metadata\n")},
		{Path: "broken.yaml", Data: []byte("a: [\nsops:\n")},
	}
	r, err := Decrypt(files, keysOf(t, id))
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(files, r.Manifests); d != "" || len(r.Secrets) != 0 {
		t.Fatalf("plain files changed: %s", d)
	}
}

func TestDecrypt_OtherKeyTypesAreRefusedWithoutCallingThem(t *testing.T) {
	// A committed file names an AWS KMS key: sops' default key service
	// would call AWS with the source component's own credentials.
	withAge := encryptFor(t, "s.yaml", kubeconfigFile(), kubeconfigRules, newIdentity(t).Recipient().String())
	metadata := regexp.MustCompile(`(?s)\n    age:\n.*?\n    lastmodified:`)
	enc := metadata.ReplaceAll(withAge, []byte("\n    kms:\n        - arn: arn:aws:kms:eu-west-1:111122223333:key/abcd\n          enc: Zm9v\n    lastmodified:"))
	if bytes.Equal(enc, withAge) {
		t.Fatal("the age key was not replaced")
	}
	_, err := Decrypt([]File{{Path: "s.yaml", Data: enc}}, keysOf(t, newIdentity(t)))
	if err == nil || !strings.Contains(err.Error(), "arn:aws:kms:eu-west-1:111122223333:key/abcd") || !strings.Contains(err.Error(), "only age") {
		t.Fatalf("want a refusal naming the KMS key, got %v", err)
	}
}

func TestDecrypt_OneBadFileFailsThePathNamingEachFile(t *testing.T) {
	id, wrong := newIdentity(t), newIdentity(t)
	good := encryptFor(t, "a.yaml", kubeconfigFile(), kubeconfigRules, id.Recipient().String())
	bad := encryptFor(t, "b.yaml", kubeconfigFile(), kubeconfigRules, wrong.Recipient().String())
	r, err := Decrypt([]File{{Path: "a.yaml", Data: good}, {Path: "b.yaml", Data: bad}, {Path: "c.yaml", Data: bad}}, keysOf(t, id))
	if err == nil || r != nil {
		t.Fatal("a path with an undecryptable file was returned")
	}
	if !strings.Contains(err.Error(), "b.yaml") || !strings.Contains(err.Error(), "c.yaml") || strings.Contains(err.Error(), "a.yaml") {
		t.Fatalf("want errors for b.yaml and c.yaml only: %v", err)
	}
}

func TestDecrypt_TooLargeFileIsRefused(t *testing.T) {
	id := newIdentity(t)
	// Refused on its size, before sops parses it: the values need not be
	// ciphertext.
	enc := []byte("apiVersion: v1\nkind: Secret\nmetadata:\n    name: big\nstringData:\n    blob: " + strings.Repeat("x", MaxFileSize) + "\nsops:\n    mac: x\n")
	_, err := Decrypt([]File{{Path: "big.yaml", Data: enc}}, keysOf(t, id))
	if err == nil || !strings.Contains(err.Error(), "big.yaml") || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("want a size refusal naming the file, got %v", err)
	}
}
