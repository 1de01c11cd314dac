package controller_test

import (
	"fmt"
	"testing"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/testenv"
)

// A GitRepo created right after a push reads that push, although another
// GitRepo of the same repository and credentials asked the server a moment
// before (its answer is shared for the suite's long ListTTL): a new
// generation asks afresh.
func TestGitRepo_NewGitRepoReadsTheLatestCommit(t *testing.T) {
	ns := testenv.Namespace(t, c, "gitops")
	srv := newServer(t, "git", "s3cret")
	c1 := srv.commit(map[string]string{"a/cm.yaml": configMap("a", "1"), "a/fleet.yaml": "defaultNamespace: a\n"})
	basicAuth(t, ns, "git-auth", "git", "s3cret")
	first := gitRepo(t, ns, "first", srv.url(), func(g *fleet.GitRepo) {
		g.Spec.ClientSecretName = "git-auth"
		g.Spec.Paths = []string{"a"}
	})
	testenv.Eventually(t, timeout, "the first GitRepo at the first commit", func() error {
		if r := getRepo(t, first); r.Status.Commit != c1 {
			return fmt.Errorf("status.commit %q, want %s", r.Status.Commit, c1)
		}
		return nil
	})

	c2 := srv.commit(map[string]string{"b/cm.yaml": configMap("b", "1"), "b/fleet.yaml": "defaultNamespace: b\n"})
	second := gitRepo(t, ns, "second", srv.url(), func(g *fleet.GitRepo) {
		g.Spec.ClientSecretName = "git-auth"
		g.Spec.Paths = []string{"b"}
	})
	testenv.Eventually(t, timeout, "the new GitRepo reads the commit pushed before it", func() error {
		r := getRepo(t, second)
		if r.Status.Commit != c2 {
			return fmt.Errorf("status.commit %q, want %s; Ready %+v", r.Status.Commit, c2, condition(r, "Ready"))
		}
		if _, ok := bundles(t, second)["second-b"]; !ok {
			return fmt.Errorf("no Bundle second-b")
		}
		return nil
	})
}
