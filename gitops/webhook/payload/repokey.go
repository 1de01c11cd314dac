package payload

import (
	"strings"

	"github.com/gitops-fleet/fleet/gitops/gitsource"
)

// RepoKey is the repository of a URL as webhooks are matched: the
// repository part of gitsource.KeyOf's normalised URL (lower-case host,
// no default port, no user, no trailing "/" or ".git") without its
// scheme, in lower case, so the https and ssh URLs a provider gives for
// a repository and the one a GitRepo names meet (git hosts name
// repositories case-insensitively). "" for a URL gitsource refuses.
func RepoKey(url string) string {
	k, err := gitsource.KeyOf(gitsource.Repository{URL: url})
	if err != nil {
		return ""
	}
	_, rest, ok := strings.Cut(k.Repo, "://")
	if !ok {
		return ""
	}
	return strings.ToLower(rest)
}

// RepoKeys are the keys of every URL of a payload, with the SSH forms
// Azure DevOps does not name (its payloads give the https URL only).
func RepoKeys(urls []string) []string {
	var keys []string
	add := func(k string) {
		if k != "" && !contains(keys, k) {
			keys = append(keys, k)
		}
	}
	for _, u := range urls {
		k := RepoKey(u)
		add(k)
		add(azureSSHKey(k))
	}
	return keys
}

// azureSSHKey maps an Azure DevOps https repository key to its SSH one:
// dev.azure.com/<org>/<project>/_git/<repo> is
// ssh.dev.azure.com/v3/<org>/<project>/<repo>, and
// <org>.visualstudio.com/[DefaultCollection/]<project>/_git/<repo> is
// vs-ssh.visualstudio.com/v3/<org>/<project>/<repo>.
func azureSSHKey(key string) string {
	host, path, ok := strings.Cut(key, "/")
	if !ok {
		return ""
	}
	parts := strings.Split(path, "/")
	switch {
	case host == "dev.azure.com" && len(parts) == 4 && parts[2] == "_git":
		return "ssh.dev.azure.com/v3/" + parts[0] + "/" + parts[1] + "/" + parts[3]
	case strings.HasSuffix(host, ".visualstudio.com") && host != "vs-ssh.visualstudio.com":
		org := strings.TrimSuffix(host, ".visualstudio.com")
		if len(parts) == 4 && parts[0] == "defaultcollection" {
			parts = parts[1:]
		}
		if len(parts) == 3 && parts[1] == "_git" {
			return "vs-ssh.visualstudio.com/v3/" + org + "/" + parts[0] + "/" + parts[2]
		}
	}
	return ""
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
