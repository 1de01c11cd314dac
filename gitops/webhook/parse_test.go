package webhook

import (
	"errors"
	"net/http"
	"testing"
)

func TestRepoKey_HTTPSAndSSHFormsOfOneRepositoryMeet(t *testing.T) {
	for _, c := range []struct{ a, b string }{
		{"https://github.com/Org/Repo", "git@github.com:org/repo.git"},
		{"https://GitHub.com/org/repo.git/", "ssh://git@github.com/org/repo"},
		{"https://user@gitlab.example.com:443/group/sub/app", "ssh://git@gitlab.example.com:22/group/sub/app.git"},
		{"http://gitea.local:3000/team/app", "http://gitea.local:3000/team/app.git"},
		{"ssh://git@bitbucket.example.com:7999/team/app.git", "ssh://other@bitbucket.example.com:7999/team/app"},
	} {
		if RepoKey(c.a) == "" || RepoKey(c.a) != RepoKey(c.b) {
			t.Errorf("RepoKey(%q) = %q, RepoKey(%q) = %q: want equal", c.a, RepoKey(c.a), c.b, RepoKey(c.b))
		}
	}
	for _, c := range []struct{ a, b string }{
		{"https://github.com/org/repo", "https://github.com/org/repo2"},
		{"https://github.com/org/repo", "https://gitlab.com/org/repo"},
		{"http://gitea.local:3000/team/app", "ssh://git@gitea.local:2222/other/app"},
	} {
		if RepoKey(c.a) == RepoKey(c.b) {
			t.Errorf("RepoKey(%q) = RepoKey(%q) = %q: want different", c.a, c.b, RepoKey(c.a))
		}
	}
	for _, bad := range []string{"", "file:///etc", "/local/path", "git://github.com/org/repo", "https://u:p@github.com/org/repo"} {
		if k := RepoKey(bad); k != "" {
			t.Errorf("RepoKey(%q) = %q, want \"\" (gitsource refuses it)", bad, k)
		}
	}
}

func TestRepoKeys_AzureDevOpsHTTPSMatchesItsSSHForm(t *testing.T) {
	for https, ssh := range map[string]string{
		"https://org@dev.azure.com/org/project/_git/app":                  "git@ssh.dev.azure.com:v3/org/project/app",
		"https://org.visualstudio.com/project/_git/app":                   "org@vs-ssh.visualstudio.com:v3/org/project/app",
		"https://org.visualstudio.com/DefaultCollection/project/_git/app": "ssh://org@vs-ssh.visualstudio.com/v3/org/project/app",
	} {
		keys := repoKeys([]string{https})
		if !contains(keys, RepoKey(ssh)) {
			t.Errorf("repoKeys(%q) = %q: want it to hold %q's key %q", https, keys, ssh, RepoKey(ssh))
		}
	}
}

func TestMatchRef(t *testing.T) {
	main := []refUpdate{{ref: "refs/heads/main", commit: commitA}}
	for _, c := range []struct {
		ref     string
		refs    []refUpdate
		follows bool
		commit  string
	}{
		{"refs/heads/main", main, true, commitA},
		{"refs/heads/dev", main, false, ""},
		{"refs/tags/main", main, false, ""},
		{"refs/heads/main", nil, true, ""}, // the payload names no ref
		{commitB, nil, false, ""},          // pinned to a commit
		{"", main, false, ""},              // an invalid branch
		{"refs/tags/v1", []refUpdate{{ref: "refs/heads/main"}, {ref: "refs/tags/v1", commit: commitB}}, true, commitB},
	} {
		follows, commit := matchRef(c.ref, c.refs)
		if follows != c.follows || commit != c.commit {
			t.Errorf("matchRef(%q, %v) = %v, %q; want %v, %q", c.ref, c.refs, follows, commit, c.follows, c.commit)
		}
	}
}

// TestParse_EveryProviderPush: each provider's push fixture reads as its
// repository URLs, ref and commit, and verifies with the value of its
// key only.
func TestParse_EveryProviderPush(t *testing.T) {
	for _, provider := range providers {
		https := repoURLs[provider][0]
		hk := fixture(provider, https, "refs/heads/main", commitA).signed("right")
		if got := providerOf(hk.header); got != provider {
			t.Errorf("%s: providerOf = %s", provider, got)
			continue
		}
		p, err := parse(provider, hk.header, hk.body)
		if err != nil {
			t.Errorf("%s: %v", provider, err)
			continue
		}
		if p.ignored != "" || len(p.refs) != 1 || p.refs[0] != (refUpdate{ref: "refs/heads/main", commit: commitA}) {
			t.Errorf("%s: read %+v, want a push of refs/heads/main at %s", provider, p, commitA)
		}
		if !contains(repoKeys(p.urls), RepoKey(https)) || !contains(repoKeys(p.urls), RepoKey(repoURLs[provider][1])) {
			t.Errorf("%s: repository keys %q miss %q or %q", provider, repoKeys(p.urls), RepoKey(https), RepoKey(repoURLs[provider][1]))
		}
		if !verify(provider, hk.header, hk.body, secretData("right")) {
			t.Errorf("%s: the signed payload does not verify with its secret", provider)
		}
		for what, data := range map[string]map[string][]byte{
			"another secret": secretData("wrong"),
			"an empty one":   secretData(""),
			"no keys":        {},
		} {
			if verify(provider, hk.header, hk.body, data) {
				t.Errorf("%s: the payload verifies with %s", provider, what)
			}
		}
		tampered := append([]byte{}, hk.body...)
		tampered[len(tampered)-2] = ' '
		if provider != GitLab && provider != AzureDevOps && verify(provider, hk.header, tampered, secretData("right")) {
			t.Errorf("%s: a changed body verifies with the signature of the original", provider)
		}
	}
}

func TestParse_DeletedRefAndTagPushes(t *testing.T) {
	hk := fixture(GitHub, "https://github.com/org/app", "refs/heads/gone", "0000000000000000000000000000000000000000")
	p, err := parse(GitHub, hk.header, hk.body)
	if err != nil || len(p.refs) != 1 || p.refs[0].commit != "" {
		t.Errorf("a deleted branch: %+v, %v; want its ref without commit", p, err)
	}
	hk = fixture(GitLab, "https://gitlab.com/org/app", "refs/tags/v1.0.0", commitA)
	p, err = parse(GitLab, hk.header, hk.body)
	if err != nil || len(p.refs) != 1 || p.refs[0] != (refUpdate{ref: "refs/tags/v1.0.0", commit: commitA}) {
		t.Errorf("a GitLab tag push: %+v, %v", p, err)
	}
	hk = fixture(Bitbucket, "https://bitbucket.org/org/app", "refs/tags/v1.0.0", commitA)
	p, err = parse(Bitbucket, hk.header, hk.body)
	if err != nil || len(p.refs) != 1 || p.refs[0] != (refUpdate{ref: "refs/tags/v1.0.0", commit: commitA}) {
		t.Errorf("a Bitbucket tag push: %+v, %v", p, err)
	}
}

func TestParse_RefusesWhatIsNotAPush(t *testing.T) {
	h := http.Header{"X-Github-Event": {"push"}}
	for _, body := range []string{"", "[]", `{"ref": 3}`, `{"ref":"refs/heads/main","repository":{}}`} {
		if _, err := parse(GitHub, h, []byte(body)); !errors.Is(err, errBadPayload) {
			t.Errorf("body %q: %v, want a bad payload", body, err)
		}
	}
	if _, err := parse(unknownProvider, http.Header{}, []byte(`{}`)); !errors.Is(err, errBadPayload) {
		t.Errorf("no provider: %v, want a bad payload", err)
	}
	p, err := parse(GitHub, http.Header{"X-Github-Event": {"issues"}}, []byte(`{}`))
	if err != nil || p.ignored != "issues" {
		t.Errorf("an issues event: %+v, %v; want it ignored", p, err)
	}
}

// FuzzParse: no payload makes the parser or the verifier panic.
func FuzzParse(f *testing.F) {
	for _, provider := range providers {
		hk := fixture(provider, repoURLs[provider][0], "refs/heads/main", commitA).signed("k")
		f.Add(provider, hk.body)
	}
	f.Fuzz(func(t *testing.T, provider string, body []byte) {
		hk := fixture(GitHub, "https://github.com/org/app", "refs/heads/main", commitA).signed("k")
		if p, err := parse(provider, hk.header, body); err == nil {
			_ = repoKeys(p.urls)
		}
		_ = verify(provider, hk.header, body, secretData("k"))
	})
}
