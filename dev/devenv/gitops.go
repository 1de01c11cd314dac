package devenv

import (
	"bytes"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/gitserver"
	"github.com/gitops-fleet/fleet/gitops/sops"
)

// GitopsRepo is examples/gitops as a user's repository on a dev git server,
// read by a GitRepo in fleet-local (the design card's first use, with the
// product alone): the same steps the example's README gives a user.
type GitopsRepo struct {
	Server *gitserver.Server
	// Host is the git server's address as the clusters' pods reach it.
	Host string
	// Name is the repository (NAME.git) and the GitRepo's name.
	Name string
	// Recipient is the age public key the kubeconfig Secrets are encrypted
	// for; Identity (AGE-SECRET-KEY-1…) opens them, held only by the
	// decryption Secret.
	Recipient, Identity string
}

// GitopsNamespace is where the GitRepo lives: the local cluster's workspace,
// so that the local cluster's agent applies the repository upstream.
const GitopsNamespace = "fleet-local"

// SOPSRules is the .sops.yaml creation rule of the published repository:
// only Secrets' values are encrypted, and the MAC covers only them, so the
// Cluster beside its kubeconfig stays readable and editable in clear (a
// redeployAgentGeneration bump is a one-line change in a pull request).
var SOPSRules = sops.Rules{EncryptedRegex: "^(data|stringData)$", MACOnlyEncrypted: true}

// Publish commits dir (examples/gitops) into the repository as a user
// following its README would: each placeholder kubeconfig Secret named in
// kubeconfigs holds that kubeconfig, and every file holding one is
// encrypted with SOPS for the recipient; a .sops.yaml says how. It returns
// the commit.
func (g *GitopsRepo) Publish(dir string, kubeconfigs map[string][]byte) (string, error) {
	files, err := gitserver.DirFiles(dir)
	if err != nil {
		return "", err
	}
	found := map[string]bool{}
	for rel, b := range files {
		if ext := filepath.Ext(rel); ext != ".yaml" && ext != ".yml" {
			continue
		}
		replaced, names, err := withKubeconfigs(b, kubeconfigs)
		if err != nil {
			return "", fmt.Errorf("%s: %w", rel, err)
		}
		if len(names) == 0 {
			continue
		}
		for _, n := range names {
			found[n] = true
		}
		if files[rel], err = sops.Encrypt(rel, replaced, SOPSRules, g.Recipient); err != nil {
			return "", fmt.Errorf("%s: encrypting: %w", rel, err)
		}
	}
	for name := range kubeconfigs {
		if !found[name] {
			return "", fmt.Errorf("%s has no Secret %q to hold the kubeconfig", dir, name)
		}
	}
	files[".sops.yaml"] = []byte(fmt.Sprintf(`creation_rules:
  - path_regex: clusters/.*\.yaml$
    encrypted_regex: ^(data|stringData)$
    mac_only_encrypted: true
    age: %s
`, g.Recipient))
	if err := g.Server.CreateRepo(g.Name+".git", "main"); err != nil {
		return "", err
	}
	return g.Server.Commit(g.Name+".git", files, "fleet: start from examples/gitops, kubeconfigs encrypted with SOPS")
}

// withKubeconfigs replaces, in a multi-document YAML file, each Secret
// named in kubeconfigs by one holding that kubeconfig under key value (the
// Cluster API format), keeping its namespace; the other documents stay as
// they are, comments included. It returns the names it replaced.
func withKubeconfigs(file []byte, kubeconfigs map[string][]byte) ([]byte, []string, error) {
	docs := bytes.Split(file, []byte("\n---\n"))
	var names []string
	for i, doc := range docs {
		var meta struct {
			Kind     string            `json:"kind"`
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		if err := yaml.Unmarshal(doc, &meta); err != nil || meta.Kind != "Secret" {
			continue
		}
		kc, ok := kubeconfigs[meta.Metadata.Name]
		if !ok {
			continue
		}
		s := &corev1.Secret{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: metav1.ObjectMeta{Name: meta.Metadata.Name, Namespace: meta.Metadata.Namespace},
			Type:       corev1.SecretTypeOpaque,
			StringData: map[string]string{"value": string(kc)},
		}
		b, err := yaml.Marshal(s)
		if err != nil {
			return nil, nil, err
		}
		docs[i] = bytes.Replace(b, []byte("  creationTimestamp: null\n"), nil, 1)
		names = append(names, meta.Metadata.Name)
	}
	return bytes.Join(docs, []byte("\n---\n")), names, nil
}

// Objects are what the user creates in fleet-local to have fleet read the
// repository: the client Secret (basic auth), the decryption Secret (the
// age identity) and the GitRepo, targeting the local cluster.
func (g *GitopsRepo) Objects(pollingInterval time.Duration) []client.Object {
	creds := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: GitopsNamespace, Name: g.Name + "-git"},
		Type: corev1.SecretTypeBasicAuth,
		Data: map[string][]byte{"username": []byte(g.Server.Username), "password": []byte(g.Server.Password)}}
	key := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: GitopsNamespace, Name: g.Name + "-sops"},
		Data: map[string][]byte{"identity.agekey": []byte(g.Identity + "\n")}}
	repo := &fleet.GitRepo{
		TypeMeta:   metav1.TypeMeta{APIVersion: fleet.GroupVersion.String(), Kind: "GitRepo"},
		ObjectMeta: metav1.ObjectMeta{Namespace: GitopsNamespace, Name: g.Name},
		Spec: fleet.GitRepoSpec{
			Repo: g.Server.HTTPURL(g.Host, g.Name+".git"), Branch: "main",
			ClientSecretName: creds.Name, CABundle: g.Server.CA,
			PollingInterval: &metav1.Duration{Duration: pollingInterval},
			Targets:         []fleet.GitTarget{{ClusterName: "local"}},
			Decryption:      &fleet.Decryption{Provider: "sops", SecretRef: fleet.LocalObjectReference{Name: key.Name}},
		},
	}
	return []client.Object{creds, key, repo}
}

var redeployGeneration = regexp.MustCompile(`(?m)^(\s*redeployAgentGeneration:\s*)(\d+)\s*$`)

// BumpRedeploy commits redeployAgentGeneration+1 in file (a Cluster's, in
// clear beside its encrypted kubeconfig Secret): the one-line change a
// pull request makes. It returns the new generation and the commit.
func (g *GitopsRepo) BumpRedeploy(file string) (int64, string, error) {
	b, err := g.Server.ReadFile(g.Name+".git", file)
	if err != nil {
		return 0, "", err
	}
	m := redeployGeneration.FindSubmatch(b)
	if m == nil {
		return 0, "", fmt.Errorf("%s has no redeployAgentGeneration", file)
	}
	var gen int64
	if _, err := fmt.Sscan(string(m[2]), &gen); err != nil {
		return 0, "", err
	}
	gen++
	b = redeployGeneration.ReplaceAll(b, []byte(fmt.Sprintf("${1}%d", gen)))
	commit, err := g.Server.Commit(g.Name+".git", map[string][]byte{file: b},
		fmt.Sprintf("%s: redeployAgentGeneration %d", strings.TrimSuffix(filepath.Base(file), filepath.Ext(file)), gen))
	return gen, commit, err
}
