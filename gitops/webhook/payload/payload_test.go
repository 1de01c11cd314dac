package payload_test

import (
	"errors"
	"net/http"
	"slices"
	"testing"

	"github.com/gitops-fleet/fleet/gitops/webhook/payload"
	"github.com/gitops-fleet/fleet/gitops/webhook/webhooktest"
)

func TestRepoKey_HTTPSAndSSHFormsOfOneRepositoryMeet(t *testing.T) {
	for _, c := range []struct{ a, b string }{
		{"https://github.com/Org/Repo", "git@github.com:org/repo.git"},
		{"https://GitHub.com/org/repo.git/", "ssh://git@github.com/org/repo"},
		{"https://user@gitlab.example.com:443/group/sub/app", "ssh://git@gitlab.example.com:22/group/sub/app.git"},
		{"http://gitea.local:3000/team/app", "http://gitea.local:3000/team/app.git"},
		{"ssh://git@bitbucket.example.com:7999/team/app.git", "ssh://other@bitbucket.example.com:7999/team/app"},
	} {
		if payload.RepoKey(c.a) == "" || payload.RepoKey(c.a) != payload.RepoKey(c.b) {
			t.Errorf("payload.RepoKey(%q) = %q, payload.RepoKey(%q) = %q: want equal", c.a, payload.RepoKey(c.a), c.b, payload.RepoKey(c.b))
		}
	}
	for _, c := range []struct{ a, b string }{
		{"https://github.com/org/repo", "https://github.com/org/repo2"},
		{"https://github.com/org/repo", "https://gitlab.com/org/repo"},
		{"http://gitea.local:3000/team/app", "ssh://git@gitea.local:2222/other/app"},
	} {
		if payload.RepoKey(c.a) == payload.RepoKey(c.b) {
			t.Errorf("payload.RepoKey(%q) = payload.RepoKey(%q) = %q: want different", c.a, c.b, payload.RepoKey(c.a))
		}
	}
	for _, bad := range []string{"", "file:///etc", "/local/path", "git://github.com/org/repo", "https://u:p@github.com/org/repo"} {
		if k := payload.RepoKey(bad); k != "" {
			t.Errorf("payload.RepoKey(%q) = %q, want \"\" (gitsource refuses it)", bad, k)
		}
	}
}

func TestRepoKeys_AzureDevOpsHTTPSMatchesItsSSHForm(t *testing.T) {
	for https, ssh := range map[string]string{
		"https://org@dev.azure.com/org/project/_git/app":                  "git@ssh.dev.azure.com:v3/org/project/app",
		"https://org.visualstudio.com/project/_git/app":                   "org@vs-ssh.visualstudio.com:v3/org/project/app",
		"https://org.visualstudio.com/DefaultCollection/project/_git/app": "ssh://org@vs-ssh.visualstudio.com/v3/org/project/app",
	} {
		keys := payload.RepoKeys([]string{https})
		if !slices.Contains(keys, payload.RepoKey(ssh)) {
			t.Errorf("payload.RepoKeys(%q) = %q: want it to hold %q's key %q", https, keys, ssh, payload.RepoKey(ssh))
		}
	}
}

// TestParse_EveryProviderPush: each provider's push fixture reads as its
// repository URLs, ref and commit, and verifies with the value of its
// key only.
func TestParse_EveryProviderPush(t *testing.T) {
	for _, provider := range webhooktest.Providers {
		https := webhooktest.RepoURLs[provider][0]
		hk := webhooktest.Fixture(provider, https, "refs/heads/main", webhooktest.CommitA).Signed("right")
		if got := payload.ProviderOf(hk.Header); got != provider {
			t.Errorf("%s: providerOf = %s", provider, got)
			continue
		}
		p, err := payload.Parse(provider, hk.Header, hk.Body)
		if err != nil {
			t.Errorf("%s: %v", provider, err)
			continue
		}
		if p.Ignored != "" || len(p.Refs) != 1 || p.Refs[0] != (payload.RefUpdate{Ref: "refs/heads/main", Commit: webhooktest.CommitA}) {
			t.Errorf("%s: read %+v, want a push of refs/heads/main at %s", provider, p, webhooktest.CommitA)
		}
		if !slices.Contains(payload.RepoKeys(p.URLs), payload.RepoKey(https)) || !slices.Contains(payload.RepoKeys(p.URLs), payload.RepoKey(webhooktest.RepoURLs[provider][1])) {
			t.Errorf("%s: repository keys %q miss %q or %q", provider, payload.RepoKeys(p.URLs), payload.RepoKey(https), payload.RepoKey(webhooktest.RepoURLs[provider][1]))
		}
		if !payload.Verify(provider, hk.Header, hk.Body, webhooktest.SecretData("right")) {
			t.Errorf("%s: the signed payload does not verify with its secret", provider)
		}
		for what, data := range map[string]map[string][]byte{
			"another secret": webhooktest.SecretData("wrong"),
			"an empty one":   webhooktest.SecretData(""),
			"no keys":        {},
		} {
			if payload.Verify(provider, hk.Header, hk.Body, data) {
				t.Errorf("%s: the payload verifies with %s", provider, what)
			}
		}
		tampered := append([]byte{}, hk.Body...)
		tampered[len(tampered)-2] = ' '
		if provider != payload.GitLab && provider != payload.AzureDevOps && payload.Verify(provider, hk.Header, tampered, webhooktest.SecretData("right")) {
			t.Errorf("%s: a changed body verifies with the signature of the original", provider)
		}
	}
}

func TestParse_DeletedRefAndTagPushes(t *testing.T) {
	hk := webhooktest.Fixture(payload.GitHub, "https://github.com/org/app", "refs/heads/gone", "0000000000000000000000000000000000000000")
	p, err := payload.Parse(payload.GitHub, hk.Header, hk.Body)
	if err != nil || len(p.Refs) != 1 || p.Refs[0].Commit != "" {
		t.Errorf("a deleted branch: %+v, %v; want its ref without commit", p, err)
	}
	hk = webhooktest.Fixture(payload.GitLab, "https://gitlab.com/org/app", "refs/tags/v1.0.0", webhooktest.CommitA)
	p, err = payload.Parse(payload.GitLab, hk.Header, hk.Body)
	if err != nil || len(p.Refs) != 1 || p.Refs[0] != (payload.RefUpdate{Ref: "refs/tags/v1.0.0", Commit: webhooktest.CommitA}) {
		t.Errorf("a GitLab tag push: %+v, %v", p, err)
	}
	hk = webhooktest.Fixture(payload.Bitbucket, "https://bitbucket.org/org/app", "refs/tags/v1.0.0", webhooktest.CommitA)
	p, err = payload.Parse(payload.Bitbucket, hk.Header, hk.Body)
	if err != nil || len(p.Refs) != 1 || p.Refs[0] != (payload.RefUpdate{Ref: "refs/tags/v1.0.0", Commit: webhooktest.CommitA}) {
		t.Errorf("a Bitbucket tag push: %+v, %v", p, err)
	}
}

func TestParse_RefusesWhatIsNotAPush(t *testing.T) {
	h := http.Header{"X-Github-Event": {"push"}}
	for _, body := range []string{"", "[]", `{"ref": 3}`, `{"ref":"refs/heads/main","repository":{}}`} {
		if _, err := payload.Parse(payload.GitHub, h, []byte(body)); !errors.Is(err, payload.ErrBadPayload) {
			t.Errorf("body %q: %v, want a bad payload", body, err)
		}
	}
	if _, err := payload.Parse(payload.Unknown, http.Header{}, []byte(`{}`)); !errors.Is(err, payload.ErrBadPayload) {
		t.Errorf("no provider: %v, want a bad payload", err)
	}
	p, err := payload.Parse(payload.GitHub, http.Header{"X-Github-Event": {"issues"}}, []byte(`{}`))
	if err != nil || p.Ignored != "issues" {
		t.Errorf("an issues event: %+v, %v; want it ignored", p, err)
	}
}

// FuzzParse: no payload makes the parser or the verifier panic.
func FuzzParse(f *testing.F) {
	for _, provider := range webhooktest.Providers {
		hk := webhooktest.Fixture(provider, webhooktest.RepoURLs[provider][0], "refs/heads/main", webhooktest.CommitA).Signed("k")
		f.Add(provider, hk.Body)
	}
	f.Fuzz(func(t *testing.T, provider string, body []byte) {
		hk := webhooktest.Fixture(payload.GitHub, "https://github.com/org/app", "refs/heads/main", webhooktest.CommitA).Signed("k")
		if p, err := payload.Parse(provider, hk.Header, body); err == nil {
			_ = payload.RepoKeys(p.URLs)
		}
		_ = payload.Verify(provider, hk.Header, body, webhooktest.SecretData("k"))
	})
}
