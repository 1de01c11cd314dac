package gitsource

import (
	"fmt"
	"path"
	"path/filepath"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// TreeHashes returns, for each path of the commit (a directory, or a file), the git object hash
// of what it holds: the tree hash for a directory ("." is the whole commit), the blob hash for a
// file, symbolic links followed inside the repository. It is exact and cheap (no file is read):
// a directory whose content did not change has the same hash in every commit, so a reconciler
// rewrites only the Bundles whose path changed. A path that is not in the commit has no entry.
// Hashes cover only what is under the path; files a Bundle reads from elsewhere (a kustomize
// base, valuesFiles outside the path) need their own paths here.
func (s *Snapshot) TreeHashes(paths []string) (map[string]string, error) {
	fail := func(err error) (map[string]string, error) {
		return nil, &Error{Op: "tree-hash", Repo: s.Key.Repo, Reason: ReasonFailed, Msg: err.Error(), Err: err}
	}
	// No lock: objects are immutable, packs appear whole (renamed into place), and the
	// repository is reset or evicted only while no Snapshot is open.
	r, err := openRepo(filepath.Join(s.e.dir, "repo"))
	if err != nil {
		return fail(err)
	}
	cm, err := object.GetCommit(r.st, plumbing.NewHash(s.Commit))
	if err != nil {
		return fail(fmt.Errorf("commit %s is no longer in the cache: %w", s.Commit, err))
	}
	root, err := cm.Tree()
	if err != nil {
		return fail(err)
	}
	res := &resolver{st: r.st, root: root}
	out := make(map[string]string, len(paths))
	for _, p := range paths {
		clean := path.Clean("/" + filepath.ToSlash(p))
		if strings.HasPrefix(path.Clean(filepath.ToSlash(p)), "..") {
			return nil, &Error{Op: "tree-hash", Repo: s.Key.Repo, Reason: ReasonInvalid, Msg: fmt.Sprintf("path %q is outside the repository", p)}
		}
		hops := 0
		n, err := res.walk(nil, strings.TrimPrefix(clean, "/"), &hops)
		if err != nil {
			continue // not in this commit (or not reachable inside the tree)
		}
		out[p] = n.hash.String()
	}
	return out, nil
}
