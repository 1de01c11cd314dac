// Package payload reads git providers' webhook payloads (GitHub, GitLab,
// Bitbucket Cloud and Server, Gitea, Gogs, Azure DevOps): which provider
// sent a request, the repository and refs a push names, whether a
// webhook Secret verifies it, and the repository keys webhooks and
// GitRepos are matched by. Nothing in a payload is trusted until Verify.
package payload

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
)

// Provider names: the label of fleet_gitops_webhooks_total and what logs say.
const (
	GitHub          = "github"
	GitLab          = "gitlab"
	Bitbucket       = "bitbucket"
	BitbucketServer = "bitbucket-server"
	Gitea           = "gitea"
	Gogs            = "gogs"
	AzureDevOps     = "azure-devops"
	// Unknown is a request with no known provider's headers.
	Unknown = "unknown"
)

// Keys of a GitRepo's webhookSecret, per provider: Fleet's names, so a
// Secret written for Fleet works as it is. Gitea payloads use the "gitea"
// key when the Secret has one, else Fleet's "gogs" (Fleet verifies Gitea
// as Gogs).
const (
	GitHubKey          = "github"
	GitLabKey          = "gitlab"
	BitbucketKey       = "bitbucket"
	BitbucketServerKey = "bitbucket-server"
	GogsKey            = "gogs"
	GiteaKey           = "gitea"
	AzureUsernameKey   = "azure-username"
	AzurePasswordKey   = "azure-password"
)

// Push is what a payload says: the repository (every URL the provider
// gives for it), the refs it changed and their new commits.
type Push struct {
	Provider string
	// Ignored is set for an event that is not a push (a ping, an issue):
	// answered without verification, nothing triggered.
	Ignored string
	URLs    []string
	// Refs are the full refs pushed (refs/heads/…, refs/tags/…) with their
	// new commit ("" when the payload names none or the ref was deleted).
	Refs []RefUpdate
}

// RefUpdate is one ref a push changed and its new commit.
type RefUpdate struct {
	Ref    string
	Commit string
}

// ErrBadPayload is a payload that cannot be read (400).
var ErrBadPayload = errors.New("bad payload")

func badPayload(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadPayload, fmt.Sprintf(format, args...))
}

// ProviderOf names the provider of a request by its headers, as the
// providers document them. Gitea also sends Gogs' and GitHub's headers, and
// Gogs GitHub's: they are checked first.
func ProviderOf(h http.Header) string {
	switch {
	case h.Get("X-Gitea-Event") != "":
		return Gitea
	case h.Get("X-Gogs-Event") != "":
		return Gogs
	case h.Get("X-GitHub-Event") != "":
		return GitHub
	case h.Get("X-Gitlab-Event") != "":
		return GitLab
	case h.Get("X-Hook-UUID") != "":
		return Bitbucket
	case h.Get("X-Event-Key") != "":
		return BitbucketServer
	case h.Get("X-Vss-ActivityId") != "" || h.Get("X-Vss-SubscriptionId") != "":
		return AzureDevOps
	}
	return Unknown
}

// Parse reads a provider's payload. Nothing in it is trusted yet: it only
// finds the GitRepos whose secrets are then asked to verify it.
func Parse(provider string, h http.Header, body []byte) (Push, error) {
	p := Push{Provider: provider}
	switch provider {
	case GitHub, Gitea, Gogs:
		event := h.Get("X-GitHub-Event")
		if provider == Gitea {
			event = h.Get("X-Gitea-Event")
		} else if provider == Gogs {
			event = h.Get("X-Gogs-Event")
		}
		if event != "push" {
			p.Ignored = event
			return p, nil
		}
		var b struct {
			Ref        string `json:"ref"`
			After      string `json:"after"`
			Repository struct {
				HTMLURL  string `json:"html_url"`
				CloneURL string `json:"clone_url"`
				SSHURL   string `json:"ssh_url"`
				URL      string `json:"url"`
			} `json:"repository"`
		}
		if err := unmarshal(body, &b); err != nil {
			return p, err
		}
		r := b.Repository
		p.URLs = []string{r.HTMLURL, r.CloneURL, r.SSHURL, r.URL}
		p.Refs = []RefUpdate{{Ref: b.Ref, Commit: b.After}}
	case GitLab:
		var b struct {
			ObjectKind  string `json:"object_kind"`
			Ref         string `json:"ref"`
			CheckoutSHA string `json:"checkout_sha"`
			After       string `json:"after"`
			Project     struct {
				WebURL     string `json:"web_url"`
				GitHTTPURL string `json:"git_http_url"`
				GitSSHURL  string `json:"git_ssh_url"`
			} `json:"project"`
			Repository struct {
				Homepage   string `json:"homepage"`
				GitHTTPURL string `json:"git_http_url"`
				GitSSHURL  string `json:"git_ssh_url"`
			} `json:"repository"`
		}
		event := h.Get("X-Gitlab-Event")
		if event != "Push Hook" && event != "Tag Push Hook" && event != "System Hook" {
			p.Ignored = event
			return p, nil
		}
		if err := unmarshal(body, &b); err != nil {
			return p, err
		}
		if b.ObjectKind != "push" && b.ObjectKind != "tag_push" {
			p.Ignored = event + " " + b.ObjectKind
			return p, nil
		}
		commit := b.CheckoutSHA
		if commit == "" {
			commit = b.After
		}
		p.URLs = []string{b.Project.WebURL, b.Project.GitHTTPURL, b.Project.GitSSHURL,
			b.Repository.Homepage, b.Repository.GitHTTPURL, b.Repository.GitSSHURL}
		p.Refs = []RefUpdate{{Ref: b.Ref, Commit: commit}}
	case Bitbucket:
		if event := h.Get("X-Event-Key"); event != "repo:push" {
			p.Ignored = event
			return p, nil
		}
		var b struct {
			Push struct {
				Changes []struct {
					New *struct {
						Type   string `json:"type"`
						Name   string `json:"name"`
						Target struct {
							Hash string `json:"hash"`
						} `json:"target"`
					} `json:"new"`
					Old *struct {
						Type string `json:"type"`
						Name string `json:"name"`
					} `json:"old"`
				} `json:"changes"`
			} `json:"push"`
			Repository struct {
				Links struct {
					HTML struct {
						Href string `json:"href"`
					} `json:"html"`
				} `json:"links"`
			} `json:"repository"`
		}
		if err := unmarshal(body, &b); err != nil {
			return p, err
		}
		p.URLs = []string{b.Repository.Links.HTML.Href}
		for _, c := range b.Push.Changes {
			switch {
			case c.New != nil:
				p.Refs = append(p.Refs, RefUpdate{Ref: bitbucketRef(c.New.Type, c.New.Name), Commit: c.New.Target.Hash})
			case c.Old != nil: // a deleted branch or tag
				p.Refs = append(p.Refs, RefUpdate{Ref: bitbucketRef(c.Old.Type, c.Old.Name)})
			}
		}
	case BitbucketServer:
		if event := h.Get("X-Event-Key"); event != "repo:refs_changed" {
			p.Ignored = event
			return p, nil
		}
		var b struct {
			Repository struct {
				Links struct {
					Clone []struct {
						Href string `json:"href"`
					} `json:"clone"`
				} `json:"links"`
			} `json:"repository"`
			Changes []struct {
				RefID  string `json:"refId"`
				ToHash string `json:"toHash"`
				Type   string `json:"type"`
			} `json:"changes"`
		}
		if err := unmarshal(body, &b); err != nil {
			return p, err
		}
		for _, l := range b.Repository.Links.Clone {
			p.URLs = append(p.URLs, l.Href)
		}
		for _, c := range b.Changes {
			commit := c.ToHash
			if c.Type == "DELETE" {
				commit = ""
			}
			p.Refs = append(p.Refs, RefUpdate{Ref: c.RefID, Commit: commit})
		}
	case AzureDevOps:
		var b struct {
			EventType string `json:"eventType"`
			Resource  struct {
				RefUpdates []struct {
					Name        string `json:"name"`
					NewObjectID string `json:"newObjectId"`
				} `json:"refUpdates"`
				Repository struct {
					RemoteURL string `json:"remoteUrl"`
					SSHURL    string `json:"sshUrl"`
				} `json:"repository"`
			} `json:"resource"`
		}
		if err := unmarshal(body, &b); err != nil {
			return p, err
		}
		if b.EventType != "git.push" {
			p.Ignored = b.EventType
			return p, nil
		}
		p.URLs = []string{b.Resource.Repository.RemoteURL, b.Resource.Repository.SSHURL}
		for _, u := range b.Resource.RefUpdates {
			p.Refs = append(p.Refs, RefUpdate{Ref: u.Name, Commit: u.NewObjectID})
		}
	default:
		return p, badPayload("not a webhook of a known provider: expected the headers of GitHub (X-GitHub-Event), GitLab (X-Gitlab-Event), Bitbucket Cloud (X-Hook-UUID), Bitbucket Server (X-Event-Key), Gitea (X-Gitea-Event), Gogs (X-Gogs-Event) or Azure DevOps (X-Vss-ActivityId)")
	}
	urls := p.URLs[:0]
	for _, u := range p.URLs {
		if u != "" {
			urls = append(urls, u)
		}
	}
	p.URLs = urls
	if len(p.URLs) == 0 {
		return p, badPayload("the %s push names no repository URL", provider)
	}
	refs := p.Refs[:0]
	for _, r := range p.Refs {
		if r.Ref == "" {
			continue
		}
		if !commitRE.MatchString(r.Commit) || strings.Trim(r.Commit, "0") == "" {
			r.Commit = "" // not a commit (a deleted ref's zeros, or junk): never written to status
		}
		refs = append(refs, r)
	}
	p.Refs = refs
	return p, nil
}

var commitRE = regexp.MustCompile(`^([0-9a-f]{40}|[0-9a-f]{64})$`)

func bitbucketRef(typ, name string) string {
	switch typ {
	case "branch", "named_branch":
		return "refs/heads/" + name
	case "tag", "annotated_tag":
		return "refs/tags/" + name
	}
	return ""
}

func unmarshal(body []byte, v any) error {
	if err := json.Unmarshal(body, v); err != nil {
		return badPayload("the body is not a JSON payload of the provider: %v", err)
	}
	return nil
}

// Verify reports whether a GitRepo's webhook Secret (its data) verifies
// the request as the provider signs it. A missing or empty key, or a
// missing or malformed signature, does not verify. Comparisons take the
// same time whatever the values.
func Verify(provider string, h http.Header, body []byte, secret map[string][]byte) bool {
	switch provider {
	case GitHub:
		return verifyHMAC(secret[GitHubKey], h.Get("X-Hub-Signature-256"), "sha256=", body)
	case Gitea:
		key := secret[GiteaKey]
		if len(key) == 0 {
			key = secret[GogsKey]
		}
		return verifyHMAC(key, h.Get("X-Gitea-Signature"), "", body)
	case Gogs:
		return verifyHMAC(secret[GogsKey], h.Get("X-Gogs-Signature"), "", body)
	case GitLab:
		return equalSecret(secret[GitLabKey], h.Get("X-Gitlab-Token"))
	case Bitbucket:
		return verifyHMAC(secret[BitbucketKey], h.Get("X-Hub-Signature"), "sha256=", body)
	case BitbucketServer:
		return verifyHMAC(secret[BitbucketServerKey], h.Get("X-Hub-Signature"), "sha256=", body)
	case AzureDevOps:
		user, password, ok := basicAuth(h)
		wantUser, hasUser := secret[AzureUsernameKey]
		if !ok || !hasUser {
			return false
		}
		// Both compared, always: no early answer on the user name.
		u := equalSecret(wantUser, user) || len(wantUser) == 0 && user == ""
		p := equalSecret(secret[AzurePasswordKey], password)
		return u && p
	}
	return false
}

// verifyHMAC checks a hex HMAC-SHA256 of body (after prefix) made with key.
func verifyHMAC(key []byte, header, prefix string, body []byte) bool {
	if len(key) == 0 || header == "" {
		return false
	}
	sig, ok := strings.CutPrefix(header, prefix)
	if !ok {
		return false
	}
	got, err := hex.DecodeString(sig)
	if err != nil || len(got) != sha256.Size {
		return false
	}
	mac := hmac.New(sha256.New, key)
	mac.Write(body)
	return hmac.Equal(got, mac.Sum(nil))
}

// equalSecret compares a shared secret with what the caller sent, in a
// time that depends on neither (their hashes are compared). An empty
// secret never verifies.
func equalSecret(want []byte, got string) bool {
	if len(want) == 0 {
		return false
	}
	w := sha256.Sum256(want)
	g := sha256.Sum256([]byte(got))
	return subtle.ConstantTimeCompare(w[:], g[:]) == 1
}

func basicAuth(h http.Header) (user, password string, ok bool) {
	r := http.Request{Header: h}
	return r.BasicAuth()
}
