package main

import (
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
