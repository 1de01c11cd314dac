package webhook

import (
	"context"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/gitops/gitsource"
	"github.com/gitops-fleet/fleet/gitops/webhook/payload"
)

// RepoIndex is the field index of GitRepos by payload.RepoKey(spec.repo)
// in the manager's cache: a webhook finds the GitRepos of its repository
// without listing them all.
const RepoIndex = "gitops.fleet.cattle.io/webhook-repo"

// IndexGitRepos registers RepoIndex. Call it before the manager starts.
func IndexGitRepos(ctx context.Context, indexer client.FieldIndexer) error {
	return indexer.IndexField(ctx, &fleet.GitRepo{}, RepoIndex, func(o client.Object) []string {
		repo, ok := o.(*fleet.GitRepo)
		if !ok || repo.Spec.WebhookSecret == "" {
			// Never triggered by a webhook: not worth an index entry.
			return nil
		}
		if k := payload.RepoKey(repo.Spec.Repo); k != "" {
			return []string{k}
		}
		return nil
	})
}

// refOf is the ref a GitRepo follows as gitsource names it
// (refs/heads/<branch>, refs/tags/<tag>, or a commit SHA), "" when its
// branch or revision is not valid.
func refOf(repo *fleet.GitRepo) string {
	k, err := gitsource.KeyOf(gitsource.Repository{URL: repo.Spec.Repo, Branch: repo.Spec.Branch, Revision: repo.Spec.Revision})
	if err != nil {
		return ""
	}
	return k.Ref
}

// matchRef reports whether a push of refs concerns a GitRepo following
// ref, and the commit the push names for it ("" if none or unknown): a
// GitRepo pinned to a commit never (a push cannot change it); one on a
// branch or tag when that ref was pushed, or when the payload names no ref.
func matchRef(ref string, refs []payload.RefUpdate) (bool, string) {
	if !strings.HasPrefix(ref, "refs/") {
		return false, ""
	}
	if len(refs) == 0 {
		return true, ""
	}
	for _, r := range refs {
		if r.Ref == ref {
			return true, r.Commit
		}
	}
	return false, ""
}
