package gitserver

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gitops-fleet/fleet/gitops/gitsource"
)

// TestServer_ServesCommitsOverHTTPSAndSSHToTheSourceComponentsClient: what
// Commit writes is what the source component's git client
// (gitops/gitsource) reads over HTTPS with basic auth and the server's CA,
// and over SSH with the client key and known_hosts; a removed path is gone
// in the next commit; a wrong password and an unknown key are refused.
func TestServer_ServesCommitsOverHTTPSAndSSHToTheSourceComponentsClient(t *testing.T) {
	s, err := Start(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	if err := s.CreateRepo("apps.git", "main"); err != nil {
		t.Fatal(err)
	}
	first, err := s.Commit("apps.git", map[string][]byte{"a/fleet.yaml": []byte("defaultNamespace: a\n"), "b/cm.yaml": []byte("kind: ConfigMap\n")}, "two paths")
	if err != nil {
		t.Fatal(err)
	}
	second, err := s.Commit("apps.git", map[string][]byte{"b": nil, "a/more.yaml": []byte("x: 1\n")}, "b removed")
	if err != nil {
		t.Fatal(err)
	}
	if first == second {
		t.Fatal("the second commit is the first")
	}
	cache, err := gitsource.New(gitsource.Options{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	httpCreds, err := gitsource.ParseCredentials(map[string][]byte{"username": []byte(s.Username), "password": []byte(s.Password)})
	if err != nil {
		t.Fatal(err)
	}
	sshCreds, err := gitsource.ParseCredentials(map[string][]byte{"ssh-privatekey": s.ClientKey, "known_hosts": s.KnownHosts("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	for _, repo := range []gitsource.Repository{
		{URL: s.HTTPURL("127.0.0.1", "apps.git"), Branch: "main", Credentials: httpCreds, CABundle: s.CA},
		{URL: s.SSHURL("127.0.0.1", "apps.git"), Branch: "main", Credentials: sshCreds},
	} {
		snap, err := cache.Checkout(t.Context(), repo, time.Now())
		if err != nil {
			t.Fatalf("%s: %v", repo.URL, err)
		}
		if snap.Commit != second {
			t.Errorf("%s: commit %s, want %s", repo.URL, snap.Commit, second)
		}
		for name, want := range map[string]bool{"a/fleet.yaml": true, "a/more.yaml": true, "b/cm.yaml": false} {
			_, err := os.Stat(filepath.Join(snap.Dir, name))
			if got := err == nil; got != want {
				t.Errorf("%s: %s present %v, want %v", repo.URL, name, got, want)
			}
		}
		_ = snap.Close()
	}
	if s.Requests.Load() == 0 || s.RequestsFor("apps.git") != s.Requests.Load() || s.RequestsFor("other.git") != 0 {
		t.Errorf("HTTP requests counted: %d, %d for apps.git, %d for other.git", s.Requests.Load(), s.RequestsFor("apps.git"), s.RequestsFor("other.git"))
	}

	wrongPassword, _ := gitsource.ParseCredentials(map[string][]byte{"username": []byte(s.Username), "password": []byte("wrong")})
	unknownKey, _, err := newClientKey()
	if err != nil {
		t.Fatal(err)
	}
	otherKey, err := gitsource.ParseCredentials(map[string][]byte{"ssh-privatekey": unknownKey, "known_hosts": s.KnownHosts("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	for _, repo := range []gitsource.Repository{
		{URL: s.HTTPURL("127.0.0.1", "apps.git"), Branch: "main", Credentials: wrongPassword, CABundle: s.CA},
		{URL: s.SSHURL("127.0.0.1", "apps.git"), Branch: "main", Credentials: otherKey},
	} {
		_, err := cache.Resolve(t.Context(), repo, time.Now())
		if err == nil || gitsource.ReasonOf(err) != gitsource.ReasonAuthFailed {
			t.Errorf("%s with wrong credentials: %v, want AuthFailed", repo.URL, err)
		}
	}
}
