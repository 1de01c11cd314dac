// Package webhook is the source component's webhook receiver: git
// providers (GitHub, GitLab, Bitbucket Cloud and Server, Gitea, Gogs,
// Azure DevOps) POST push payloads to it, on a listener of its own
// (`fleet gitops --webhook-listen`, Service fleet-gitops-webhook).
//
// A payload is untrusted until a GitRepo's webhookSecret verifies it (with
// the provider's HMAC-SHA256 signature, GitLab's token or Azure DevOps'
// basic auth; Fleet's Secret keys). The GitRepos of the payload's
// repository are found through a field index of the manager's cache
// (RepoIndex, on the repository URL normalised as gitsource.KeyOf
// normalises it, without scheme); their Secrets are read uncached, once per
// request each and at most MaxSecretReads of them. Only GitRepos whose own
// Secret verifies the payload and which follow a pushed ref are triggered:
// the GitRepo controller's Trigger makes a fresh ls-remote (the payload's
// commit is never fetched or deployed; it is recorded in
// status.webhookCommit, with status.lastWebhookTime, for information).
// A GitRepo without webhookSecret is never triggered. Triggers of one
// GitRepo are at most one per MinInterval (those in between make one,
// at its end).
//
// Answers never name a GitRepo: 202 with the number triggered, 200 when a
// verified push concerns no GitRepo's ref (or for an event that is not a
// push), 401 when no GitRepo's Secret verifies it, 400 for a payload that
// cannot be read, 405 for a method but POST, 413 above MaxBodyBytes.
package webhook
