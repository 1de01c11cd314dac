package renderworker

import (
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	kustypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// kustomizeBuild runs kustomize directly, as kustomize.BuildOverlay does but
// without its overlay check: what would happen if a remote reference slipped
// past the check.
func kustomizeBuild(t *testing.T, kustomization string) error {
	t.Helper()
	fsys := filesys.MakeFsInMemory()
	if err := fsys.MkdirAll("/overlay"); err != nil {
		t.Fatal(err)
	}
	if err := fsys.WriteFile("/overlay/kustomization.yaml", []byte(kustomization)); err != nil {
		t.Fatal(err)
	}
	opts := krusty.MakeDefaultOptions()
	opts.PluginConfig = kustypes.DisabledPluginConfig()
	opts.LoadRestrictions = kustypes.LoadRestrictionsRootOnly
	_, err := krusty.MakeKustomizer(opts).Run(fsys, "/overlay")
	return err
}

// TestIsolate_KustomizeCannotFetchOrRunGit is the backstop behind the
// overlay check: in a worker, kustomize's loader cannot reach the network
// (it uses Go's default HTTP transport) nor run git (found on PATH). The
// in-memory filesystem and LoadRestrictionsRootOnly do not stop either, as
// the first half shows.
func TestIsolate_KustomizeCannotFetchOrRunGit(t *testing.T) {
	web, gitServer := listen(t), listen(t)
	httpResource := "resources:\n- http://" + web.Addr().String() + "/deploy.yaml\n"
	// Not an http(s) URL, so only git (through ssh) would connect.
	gitResource := "resources:\n- ssh://git@" + gitServer.Addr().String() + "/org/repo.git//deploy?ref=v1\n"
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is needed to show that kustomize would run it")
	}

	// Without isolation kustomize connects, over HTTP and through git.
	_ = kustomizeBuild(t, httpResource)
	_ = kustomizeBuild(t, gitResource)
	if web.n.Load() == 0 || gitServer.n.Load() == 0 {
		t.Fatalf("control: without isolation kustomize made %d HTTP and %d git connections; the test proves nothing", web.n.Load(), gitServer.n.Load())
	}
	web.n.Store(0)
	gitServer.n.Store(0)

	t.Setenv("PATH", os.Getenv("PATH")) // restored after the test
	saved := http.DefaultTransport
	t.Cleanup(func() { http.DefaultTransport = saved })
	isolate()

	if err := kustomizeBuild(t, httpResource); err == nil || !strings.Contains(err.Error(), errNoNetwork.Error()) {
		t.Errorf("http resource: got %v, want %v", err, errNoNetwork)
	}
	if err := kustomizeBuild(t, gitResource); err == nil || !strings.Contains(err.Error(), "no 'git' program on path") {
		t.Errorf("git resource: got %v, want git not found", err)
	}
	if err := kustomizeBuild(t, "resources:\n- http://"+web.Addr().String()+"/org/repo.git//deploy?ref=v1\n"); err == nil {
		t.Error("git-over-http resource: built")
	}
	if web.n.Load() != 0 || gitServer.n.Load() != 0 {
		t.Errorf("isolated: %d HTTP and %d git connections, want none", web.n.Load(), gitServer.n.Load())
	}
}
