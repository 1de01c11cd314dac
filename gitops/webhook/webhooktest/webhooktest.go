// Package webhooktest is a test helper: git providers' push webhooks as
// they send them (headers and payload, signed with a secret), for the
// tests of gitops/webhook and gitops/webhook/payload.
package webhooktest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/gitops-fleet/fleet/gitops/webhook/payload"
)

// Payloads shaped as the providers document their push events (trimmed
// to the fields a push carries about the repository and its refs, plus a
// few others so the decoder meets what it really gets). repoURL is the
// https URL of the repository ("https://git.example.com/team/app").

// Hook is one provider's push: its headers and body, before signing.
type Hook struct {
	Provider string
	Header   http.Header
	Body     []byte
}

// Fixture makes a push of ref (a full ref) to commit for repoURL.
func Fixture(provider, repoURL, ref, commit string) Hook {
	u, err := url.Parse(repoURL)
	if err != nil {
		panic(err)
	}
	host, path := u.Host, strings.TrimPrefix(u.Path, "/")
	name := path[strings.LastIndex(path, "/")+1:]
	h := http.Header{"Content-Type": {"application/json"}}
	var body string
	switch provider {
	case payload.GitHub:
		h.Set("X-GitHub-Event", "push")
		h.Set("X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958")
		h.Set("X-GitHub-Hook-ID", "292430182")
		h.Set("User-Agent", "GitHub-Hookshot/044aadd")
		body = fmt.Sprintf(`{
  "ref": %q, "before": "0000000000000000000000000000000000000001", "after": %q,
  "created": false, "deleted": false, "forced": false, "base_ref": null,
  "compare": "https://%[3]s/%[4]s/compare/0000000000...%.12[2]s",
  "commits": [{"id": %[2]q, "message": "change web", "added": [], "removed": [], "modified": ["web/configmap.yaml"]}],
  "head_commit": {"id": %[2]q, "message": "change web"},
  "repository": {
    "id": 186853002, "name": %[5]q, "full_name": %[4]q, "private": true,
    "html_url": "https://%[3]s/%[4]s", "url": "https://%[3]s/%[4]s",
    "git_url": "git://%[3]s/%[4]s.git", "ssh_url": "git@%[3]s:%[4]s.git",
    "clone_url": "https://%[3]s/%[4]s.git", "svn_url": "https://%[3]s/%[4]s",
    "default_branch": "main", "master_branch": "main"
  },
  "pusher": {"name": "dev", "email": "dev@example.com"},
  "sender": {"login": "dev", "id": 21031067}
}`, ref, commit, host, path, name)
	case payload.Gitea, payload.Gogs:
		if provider == payload.Gitea {
			h.Set("X-Gitea-Event", "push")
			h.Set("X-Gitea-Delivery", "1ed25ae3-d0b6-4c4d-8c2f-2b9d6f4f7c11")
		}
		// Both send Gogs' headers, and GitHub's event name.
		h.Set("X-Gogs-Event", "push")
		h.Set("X-Gogs-Delivery", "1ed25ae3-d0b6-4c4d-8c2f-2b9d6f4f7c11")
		h.Set("X-GitHub-Event", "push")
		body = fmt.Sprintf(`{
  "secret": "", "ref": %q, "before": "0000000000000000000000000000000000000001", "after": %q,
  "compare_url": "https://%[3]s/%[4]s/compare/0000000000...%.12[2]s",
  "commits": [{"id": %[2]q, "message": "change web\n", "url": "https://%[3]s/%[4]s/commit/%[2]s"}],
  "repository": {
    "id": 1, "name": %[5]q, "full_name": %[4]q, "private": true,
    "html_url": "https://%[3]s/%[4]s", "ssh_url": "git@%[3]s:%[4]s.git",
    "clone_url": "https://%[3]s/%[4]s.git", "default_branch": "main"
  },
  "pusher": {"id": 1, "login": "dev", "username": "dev"},
  "sender": {"id": 1, "login": "dev", "username": "dev"}
}`, ref, commit, host, path, name)
	case payload.GitLab:
		event, kind := "Push Hook", "push"
		if strings.HasPrefix(ref, "refs/tags/") {
			event, kind = "Tag Push Hook", "tag_push"
		}
		h.Set("X-Gitlab-Event", event)
		h.Set("X-Gitlab-Event-UUID", "13792a34-cac6-4fda-95a8-c58e00a3954e")
		h.Set("X-Gitlab-Instance", "https://"+host)
		body = fmt.Sprintf(`{
  "object_kind": %q, "event_name": %[1]q,
  "before": "0000000000000000000000000000000000000001", "after": %[3]q, "ref": %[2]q, "ref_protected": true,
  "checkout_sha": %[3]q, "user_id": 4, "user_name": "Dev", "user_username": "dev", "project_id": 15,
  "project": {
    "id": 15, "name": %[6]q, "web_url": "https://%[4]s/%[5]s",
    "git_ssh_url": "git@%[4]s:%[5]s.git", "git_http_url": "https://%[4]s/%[5]s.git",
    "namespace": "team", "visibility_level": 0, "path_with_namespace": %[5]q, "default_branch": "main",
    "homepage": "https://%[4]s/%[5]s", "url": "git@%[4]s:%[5]s.git",
    "ssh_url": "git@%[4]s:%[5]s.git", "http_url": "https://%[4]s/%[5]s.git"
  },
  "commits": [{"id": %[3]q, "message": "change web", "title": "change web", "added": [], "modified": ["web/configmap.yaml"], "removed": []}],
  "total_commits_count": 1,
  "repository": {
    "name": %[6]q, "url": "git@%[4]s:%[5]s.git", "description": "",
    "homepage": "https://%[4]s/%[5]s", "git_http_url": "https://%[4]s/%[5]s.git",
    "git_ssh_url": "git@%[4]s:%[5]s.git", "visibility_level": 0
  }
}`, kind, ref, commit, host, path, name)
	case payload.Bitbucket:
		typ, short := "branch", strings.TrimPrefix(ref, "refs/heads/")
		if strings.HasPrefix(ref, "refs/tags/") {
			typ, short = "tag", strings.TrimPrefix(ref, "refs/tags/")
		}
		h.Set("X-Event-Key", "repo:push")
		h.Set("X-Hook-UUID", "cb9e2a8e-4e46-4f6e-9ac9-8f3bd2a4b1b7")
		h.Set("X-Request-UUID", "afe1b4d2-24a3-4b11-9a2f-96e1f0a4b6a1")
		h.Set("X-Attempt-Number", "1")
		h.Set("User-Agent", "Bitbucket-Webhooks/2.0")
		body = fmt.Sprintf(`{
  "push": {"changes": [{
    "new": {"type": %q, "name": %q, "target": {"type": "commit", "hash": %q, "message": "change web\n"}},
    "old": {"type": %[1]q, "name": %[2]q, "target": {"type": "commit", "hash": "0000000000000000000000000000000000000001"}},
    "created": false, "forced": false, "closed": false, "truncated": false,
    "commits": [{"type": "commit", "hash": %[3]q}]
  }]},
  "repository": {
    "type": "repository", "full_name": %[5]q, "name": %[6]q, "scm": "git", "is_private": true,
    "uuid": "{b7ba9eab-31ee-4c4e-84c6-bb0dbd5b5a6a}",
    "links": {"self": {"href": "https://api.%[4]s/2.0/repositories/%[5]s"}, "html": {"href": "https://%[4]s/%[5]s"}}
  },
  "actor": {"type": "user", "display_name": "Dev"}
}`, typ, short, commit, host, path, name)
	case payload.BitbucketServer:
		typ := "BRANCH"
		if strings.HasPrefix(ref, "refs/tags/") {
			typ = "TAG"
		}
		h.Set("X-Event-Key", "repo:refs_changed")
		h.Set("X-Request-Id", "d0f1b5a3-1c0e-4a42-a3b5-28ad5a9b3d71")
		// Bitbucket Server's clone URLs: https://<host>/scm/<project>/<repo>.git,
		// and ssh://git@<host>:7999/<project>/<repo>.git.
		body = fmt.Sprintf(`{
  "eventKey": "repo:refs_changed", "date": "2026-12-05T10:00:00+0000",
  "actor": {"name": "dev", "emailAddress": "dev@example.com", "id": 2, "displayName": "Dev", "slug": "dev", "type": "NORMAL"},
  "repository": {
    "slug": %[6]q, "id": 84, "name": %[6]q, "scmId": "git", "state": "AVAILABLE", "forkable": true,
    "project": {"key": "TEAM", "id": 84, "name": "team", "public": false, "type": "NORMAL"},
    "public": false,
    "links": {
      "clone": [{"href": "ssh://git@%[4]s:7999/%[8]s.git", "name": "ssh"}, {"href": "https://%[4]s/%[5]s.git", "name": "http"}],
      "self": [{"href": "https://%[4]s/projects/TEAM/repos/%[6]s/browse"}]
    }
  },
  "changes": [{
    "ref": {"id": %[1]q, "displayId": %[2]q, "type": %[3]q},
    "refId": %[1]q, "fromHash": "0000000000000000000000000000000000000001", "toHash": %[7]q, "type": "UPDATE"
  }]
}`, ref, ref[strings.LastIndex(ref, "/")+1:], typ, host, path, name, commit, strings.TrimPrefix(path, "scm/"))
	case payload.AzureDevOps:
		h.Set("X-Vss-ActivityId", "8b3b8c5e-0b7e-4a5a-9e5c-2f0c1d7e9a10")
		h.Set("X-Vss-SubscriptionId", "0c4d5e6f-7a8b-4c9d-8e0f-1a2b3c4d5e6f")
		body = fmt.Sprintf(`{
  "subscriptionId": "0c4d5e6f-7a8b-4c9d-8e0f-1a2b3c4d5e6f", "notificationId": 3,
  "id": "03c164c2-8912-4d5e-8009-3707d5f83734", "eventType": "git.push", "publisherId": "tfs",
  "message": {"text": "Dev pushed updates to %[4]s:main."},
  "resource": {
    "commits": [{"commitId": %[2]q, "comment": "change web"}],
    "refUpdates": [{"name": %[1]q, "oldObjectId": "0000000000000000000000000000000000000001", "newObjectId": %[2]q}],
    "repository": {
      "id": "278d5cd2-584d-4b63-824a-2ba458937249", "name": %[4]q,
      "url": "https://%[3]s/_apis/git/repositories/278d5cd2-584d-4b63-824a-2ba458937249",
      "project": {"id": "6ce954b1-ce1f-45d1-b94d-e6bf2464ba2c", "name": "project"},
      "defaultBranch": "refs/heads/main", "remoteUrl": "https://%[3]s/%[5]s"
    },
    "pushedBy": {"displayName": "Dev", "uniqueName": "dev@example.com"},
    "pushId": 14, "date": "2026-12-05T10:00:00Z"
  },
  "resourceVersion": "1.0", "createdDate": "2026-12-05T10:00:01Z"
}`, ref, commit, host, name, path)
	default:
		panic("no fixture for " + provider)
	}
	return Hook{Provider: provider, Header: h, Body: []byte(body)}
}

// Signed returns the hook signed (or authenticated) with the secret's
// value for its provider, as the provider does.
func (hk Hook) Signed(secret string) Hook {
	h := hk.Header.Clone()
	mac := func() string {
		m := hmac.New(sha256.New, []byte(secret))
		m.Write(hk.Body)
		return hex.EncodeToString(m.Sum(nil))
	}
	switch hk.Provider {
	case payload.GitHub:
		h.Set("X-Hub-Signature-256", "sha256="+mac())
	case payload.Gitea:
		h.Set("X-Gitea-Signature", mac())
		h.Set("X-Gogs-Signature", mac())
		h.Set("X-Hub-Signature-256", "sha256="+mac())
	case payload.Gogs:
		h.Set("X-Gogs-Signature", mac())
	case payload.GitLab:
		h.Set("X-Gitlab-Token", secret)
	case payload.Bitbucket, payload.BitbucketServer:
		h.Set("X-Hub-Signature", "sha256="+mac())
	case payload.AzureDevOps:
		r := http.Request{Header: h}
		r.SetBasicAuth("fleet", secret)
	}
	return Hook{Provider: hk.Provider, Header: h, Body: hk.Body}
}

// SecretData is a webhook Secret holding value for every provider (Fleet's
// keys), the Azure DevOps user being "fleet".
func SecretData(value string) map[string][]byte {
	return map[string][]byte{
		payload.GitHubKey: []byte(value), payload.GitLabKey: []byte(value), payload.BitbucketKey: []byte(value),
		payload.BitbucketServerKey: []byte(value), payload.GogsKey: []byte(value),
		payload.AzureUsernameKey: []byte("fleet"), payload.AzurePasswordKey: []byte(value),
	}
}

// Providers are every provider the receiver reads.
var Providers = []string{payload.GitHub, payload.GitLab, payload.Bitbucket, payload.BitbucketServer, payload.Gitea, payload.Gogs, payload.AzureDevOps}

// RepoURLs are the repository each provider's tests use (https, as the
// provider's payload names it) and the SSH form a GitRepo may name instead
// (tests of the webhook suite replace "/app" with a path of their own).
var RepoURLs = map[string][2]string{
	payload.GitHub:          {"https://github.example.com/team/app", "git@github.example.com:team/app.git"},
	payload.GitLab:          {"https://gitlab.example.com/team/app", "ssh://git@gitlab.example.com/team/app.git"},
	payload.Bitbucket:       {"https://bitbucket.example.org/team/app", "git@bitbucket.example.org:team/app.git"},
	payload.BitbucketServer: {"https://bitbucket.example.com/scm/team/app", "ssh://git@bitbucket.example.com:7999/team/app.git"},
	payload.Gitea:           {"https://gitea.example.com/team/app", "git@gitea.example.com:team/app.git"},
	payload.Gogs:            {"https://gogs.example.com/team/app", "git@gogs.example.com:team/app.git"},
	payload.AzureDevOps:     {"https://dev.azure.com/org/project/_git/app", "git@ssh.dev.azure.com:v3/org/project/app"},
}

// Commits pushes name.
const (
	CommitA = "4f9e2a1c0b8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f"
	CommitB = "a1b2c3d4e5f60718293a4b5c6d7e8f9001122334"
)
