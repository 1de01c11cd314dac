package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func exitCode(err error) int {
	var e *exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &e):
		return e.Code
	default:
		return -1
	}
}

// git runs git in dir, failing the test on error.
func git(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@example.invalid"}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}

// TestDiff_GitRefsAndExitCodes: a repository with the example committed and
// a pull request bumping redeployAgentGeneration: `fleet diff --base main
// --head pr` reads both refs from git, exits 1 and shows the one rollout;
// the same ref on both sides exits 0; bad input exits 2 with a clear error.
// exampleRepo makes a git repository with examples/gitops committed at sub
// on branch main and, for each pull request (branch → edit of
// clusters/dev-1.yaml, old → new), a branch with it; the test runs in it.
func exampleRepo(t *testing.T, sub string, prs map[string][2]string) string {
	t.Helper()
	repo := t.TempDir()
	if err := os.MkdirAll(filepath.Join(repo, sub), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-r", "../../examples/gitops/.", filepath.Join(repo, sub)).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	git(t, repo, "init", "-q", "-b", "main")
	git(t, repo, "add", ".")
	git(t, repo, "commit", "-q", "-m", "fleet")
	for branch, edit := range prs {
		git(t, repo, "checkout", "-q", "-b", branch, "main")
		p := filepath.Join(repo, sub, "clusters", "dev-1.yaml")
		b, _ := os.ReadFile(p)
		if !strings.Contains(string(b), edit[0]) {
			t.Fatalf("clusters/dev-1.yaml has no %q", edit[0])
		}
		if err := os.WriteFile(p, []byte(strings.Replace(string(b), edit[0], edit[1], 1)), 0o644); err != nil {
			t.Fatal(err)
		}
		git(t, repo, "commit", "-q", "-am", branch)
	}
	git(t, repo, "checkout", "-q", "main")
	wd, _ := os.Getwd()
	if err := os.Chdir(repo); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chdir(wd) })
	return repo
}

func TestDiff_GitRefsAndExitCodes(t *testing.T) {
	exampleRepo(t, "fleet", map[string][2]string{"pr": {"redeployAgentGeneration: 1", "redeployAgentGeneration: 2"}})

	out, err := runCLI(t, "diff", "--base", "main", "--head", "pr", "--path", "fleet", "--config", "config/fleet-controller.yaml", "--format", "markdown")
	if exitCode(err) != 1 {
		t.Fatalf("a change: exit %d (%v), want 1", exitCode(err), err)
	}
	for _, want := range []string{"1 cluster(s) changed, 1 agent(s) rolled, 0 Bundle move(s)", "`main:fleet` → `pr:fleet`", "redeployAgentGeneration 1 → 2", "```diff"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the markdown report lacks %q:\n%s", want, out)
		}
	}
	if _, err := runCLI(t, "diff", "--base", "pr", "--head", "pr", "--path", "fleet"); exitCode(err) != 0 {
		t.Errorf("no change: exit %d (%v), want 0", exitCode(err), err)
	}
	for name, args := range map[string][]string{
		"a ref that does not exist": {"--base", "nosuchref", "--head", "pr", "--path", "fleet"},
		"a path the ref lacks":      {"--base", "main", "--head", "pr", "--path", "elsewhere"},
		"a bad format":              {"--base", "main", "--head", "pr", "--format", "html"},
		"a missing configuration":   {"--base", "main", "--head", "pr", "--path", "fleet", "--config", "nope.yaml"},
	} {
		_, err := runCLI(t, append([]string{"diff"}, args...)...)
		if exitCode(err) != 2 || err.Error() == "" {
			t.Errorf("%s: exit %d (%v), want 2 with a message", name, exitCode(err), err)
		}
	}
}

// TestGitopsExample_ReadmeShowsFleetDiff: the fleet diff outputs
// examples/gitops/README.md shows are what fleet diff prints for those pull
// requests.
func TestGitopsExample_ReadmeShowsFleetDiff(t *testing.T) {
	doc := readme(t)
	exampleRepo(t, ".", map[string][2]string{
		"pr":        {"redeployAgentGeneration: 1", "redeployAgentGeneration: 2"},
		"pr-labels": {"    env: dev", "    env: staging"},
	})
	for _, branch := range []string{"pr", "pr-labels"} {
		args := []string{"diff", "--base", "main", "--head", branch, "--config", "config/fleet-controller.yaml"}
		out, err := runCLI(t, args...)
		if exitCode(err) != 1 {
			t.Fatalf("%s: exit %d (%v), want 1", branch, exitCode(err), err)
		}
		readmeMustShow(t, doc, "fleet "+strings.Join(args, " "), string(out))
	}
}

// exampleCopy copies examples/gitops into a new directory, applying each
// edit (old → new) to clusters/dev-1.yaml.
func exampleCopy(t *testing.T, edits ...[2]string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("cp", "-r", "../../examples/gitops/.", dir).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	p := filepath.Join(dir, "clusters", "dev-1.yaml")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, e := range edits {
		if !strings.Contains(s, e[0]) {
			t.Fatalf("clusters/dev-1.yaml has no %q", e[0])
		}
		s = strings.Replace(s, e[0], e[1], 1)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// sopsSecret is dev-1's kubeconfig Secret as SOPS leaves it
// (encrypted_regex ^(data|stringData)$): data is ciphertext, not base64.
const sopsSecret = `apiVersion: v1
kind: Secret
metadata:
  name: dev-1-kubeconfig
  namespace: fleet-default
type: Opaque
data:
  value: ENC[AES256_GCM,data:Zm9vYmFy,iv:aXY=,tag:dGFn,type:str]
sops:
  age:
    - recipient: age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p
      enc: |
        -----BEGIN AGE ENCRYPTED FILE-----
        YWdl
        -----END AGE ENCRYPTED FILE-----
  lastmodified: "2026-12-04T00:00:00Z"
  mac: ENC[AES256_GCM,data:bWFj,iv:aXY=,tag:dGFn,type:str]
  encrypted_regex: ^(data|stringData)$
  version: 3.9.0
`

// TestDiff_OutputFormatsAndExitCodes: -o json is one document a bot can
// read (what changed, per cluster), -o markdown and --format markdown are
// the same, and the two disagreeing is a usage error; exit 1 with changes.
func TestDiff_OutputFormatsAndExitCodes(t *testing.T) {
	base := exampleCopy(t)
	head := exampleCopy(t, [2]string{"redeployAgentGeneration: 1", "redeployAgentGeneration: 2"})
	code, out, stderr := runMain(t, "diff", "--base", base, "--head", head, "--config", "config/fleet-controller.yaml", "-o", "json")
	if code != 1 || stderr != "" {
		t.Fatalf("exit %d, stderr %q; want 1 and nothing on stderr (changes are a result, not an error)", code, stderr)
	}
	var doc struct {
		Changed bool `json:"changed"`
		Summary struct {
			ClustersChanged, AgentsRolled, BundlesMoved int
		} `json:"summary"`
		Clusters []struct {
			Cluster, Flow, Change, Agent string
			Redeploy, Rolls              bool
			Why                          []string
			ManifestDiff                 string
		} `json:"clusters"`
		Tokens []any `json:"tokens"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("-o json is not JSON: %v\n%s", err, out)
	}
	if !doc.Changed || doc.Summary.ClustersChanged != 1 || doc.Summary.AgentsRolled != 1 || len(doc.Clusters) != 1 || doc.Tokens == nil {
		t.Fatalf("-o json: %+v", doc)
	}
	c := doc.Clusters[0]
	if c.Cluster != "fleet-default/dev-1" || c.Flow != "manager-initiated" || c.Change != "changed" || !c.Redeploy || !c.Rolls ||
		c.Agent != "pushed again, rolls (new pod)" || len(c.Why) != 1 || c.Why[0] != "redeployAgentGeneration 1 → 2" || !strings.Contains(c.ManifestDiff, `+          value: "2"`) {
		t.Errorf("-o json cluster: %+v", c)
	}

	_, md, _ := runMain(t, "diff", "--base", base, "--head", head, "--config", "config/fleet-controller.yaml", "-o", "markdown")
	_, legacy, _ := runMain(t, "diff", "--base", base, "--head", head, "--config", "config/fleet-controller.yaml", "--format", "markdown")
	if md != legacy || !strings.HasPrefix(md, "### fleet diff") {
		t.Errorf("-o markdown and --format markdown differ:\n%s\n---\n%s", md, legacy)
	}
	if code, _, stderr := runMain(t, "diff", "--base", base, "--head", head, "-o", "json", "--format", "markdown"); code != 2 || !strings.Contains(stderr, "disagree") {
		t.Errorf("-o json --format markdown: exit %d %q, want 2", code, stderr)
	}
	if code, out, _ := runMain(t, "diff", "--base", base, "--head", base, "-o", "json"); code != 0 || !strings.Contains(out, `"changed": false`) {
		t.Errorf("no change: exit %d %s, want 0", code, out)
	}
}

// TestDiff_SideWithoutFleetObjects: a side without any fleet object (the
// wrong --path) is warned about on stderr, naming it; neither side with any
// is an error (exit 2) instead of a silent "no change".
func TestDiff_SideWithoutFleetObjects(t *testing.T) {
	example := exampleCopy(t)
	notFleet := t.TempDir()
	writeFile(t, notFleet, "app/deployment.yaml", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n")
	writeFile(t, notFleet, "README.md", "not YAML\n")
	cfg, err := os.ReadFile("../../examples/gitops/config/fleet-controller.yaml")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, notFleet, "config/fleet-controller.yaml", string(cfg))

	code, _, stderr := runMain(t, "diff", "--base", notFleet, "--head", example, "--config", "config/fleet-controller.yaml")
	if code != 1 || !strings.Contains(stderr, "warning: "+notFleet+" holds no fleet object") || strings.Contains(stderr, "warning: "+example) {
		t.Errorf("one side without fleet objects: exit %d, stderr %q; want 1 (everything is added) and a warning naming %s", code, stderr, notFleet)
	}
	other := t.TempDir()
	code, out, stderr := runMain(t, "diff", "--base", notFleet, "--head", other)
	if code != 2 || !strings.Contains(stderr, "neither "+notFleet+" nor "+other+" holds a fleet object") || out != "" {
		t.Errorf("neither side with fleet objects: exit %d, stdout %q, stderr %q; want 2 naming both", code, out, stderr)
	}

	// The same through git refs: a --path without fleet objects.
	exampleRepo(t, "fleet", nil)
	writeFile(t, ".", "docs/site.yaml", "title: docs\n")
	git(t, ".", "add", ".")
	git(t, ".", "commit", "-q", "-m", "docs")
	code, _, stderr = runMain(t, "diff", "--base", "main", "--head", "HEAD", "--path", "docs")
	if code != 2 || !strings.Contains(stderr, "neither main:docs nor HEAD:docs holds a fleet object") || !strings.Contains(stderr, "--path") {
		t.Errorf("--path docs: exit %d, stderr %q; want 2 naming the path", code, stderr)
	}
}

// TestDiff_EncryptedKubeconfigSecretIsNotCheckedAndSaysSo: a SOPS-encrypted
// kubeconfig Secret is read without error, and the report says that the
// server it names is not checked (it cannot see a server change in it); a
// Secret in clear text gets no such note.
func TestDiff_EncryptedKubeconfigSecretIsNotCheckedAndSaysSo(t *testing.T) {
	encrypt := func(edits ...[2]string) string {
		dir := exampleCopy(t, edits...)
		p := filepath.Join(dir, "clusters", "dev-1.yaml")
		b, _ := os.ReadFile(p)
		cluster, _, ok := strings.Cut(string(b), "\n---\n")
		if !ok {
			t.Fatal("clusters/dev-1.yaml has no second document")
		}
		if err := os.WriteFile(p, []byte(cluster+"\n---\n"+sopsSecret), 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	base, head := encrypt(), encrypt([2]string{"redeployAgentGeneration: 1", "redeployAgentGeneration: 2"})
	note := "Cluster fleet-default/dev-1: its kubeconfig Secret fleet-default/dev-1-kubeconfig is encrypted (SOPS): server not checked"
	for _, format := range []string{"text", "markdown", "json"} {
		code, out, stderr := runMain(t, "diff", "--base", base, "--head", head, "--config", "config/fleet-controller.yaml", "-o", format)
		if code != 1 || !strings.Contains(out, note) {
			t.Errorf("-o %s: exit %d, stderr %q; want 1 and the note %q in:\n%s", format, code, stderr, note, out)
		}
	}
	if code, out, _ := runMain(t, "diff", "--base", base, "--head", base, "--config", "config/fleet-controller.yaml"); code != 0 || !strings.Contains(out, "server not checked") {
		t.Errorf("no change, encrypted Secret: exit %d, want 0 and the note still:\n%s", code, out)
	}
	plain := exampleCopy(t)
	if _, out, _ := runMain(t, "diff", "--base", plain, "--head", head, "--config", "config/fleet-controller.yaml"); !strings.Contains(out, note) {
		t.Errorf("encrypted on one side only: want the note:\n%s", out)
	}
	if _, out, _ := runMain(t, "diff", "--base", plain, "--head", plain, "--config", "config/fleet-controller.yaml"); strings.Contains(out, "server not checked") {
		t.Errorf("a Secret in clear text: no note wanted:\n%s", out)
	}
}

// TestDiff_ErrorsAfterKustomizeNameTheObject: after kustomize build the
// file is gone, so a Cluster that does not decode is named by kind,
// namespace and name, with the field that was meant.
func TestDiff_ErrorsAfterKustomizeNameTheObject(t *testing.T) {
	base := exampleCopy(t)
	head := exampleCopy(t, [2]string{"  redeployAgentGeneration: 1\n", "  redeployAgentGeneration: 1\n  agentToleration: []\n"})
	code, _, stderr := runMain(t, "diff", "--base", base, "--head", head, "--config", "config/fleet-controller.yaml")
	for _, want := range []string{"(kustomize build, resource", "Cluster fleet-default/dev-1: ", `unknown field "spec.agentToleration", did you mean "agentTolerations"?`} {
		if code != 2 || !strings.Contains(stderr, want) {
			t.Errorf("exit %d, stderr %q: want 2 and %q", code, stderr, want)
		}
	}
}
