package gitsource

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/go-git/go-billy/v5/osfs"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/storage/filesystem"
)

// localRepo is an entry's bare, shallow repository on disk (go-git filesystem storage: pack
// data goes to disk as it arrives, not to memory).
type localRepo struct {
	dir string
	st  *filesystem.Storage
}

// objectCacheBytes and largeObject keep go-git's memory small: an object over largeObject is
// streamed from its pack, never held whole.
const (
	objectCacheBytes = 8 << 20
	largeObject      = 1 << 20
)

func openRepo(dir string) (*localRepo, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	st := filesystem.NewStorageWithOptions(osfs.New(dir), cache.NewObjectLRU(objectCacheBytes), filesystem.Options{LargeObjectThreshold: largeObject})
	return &localRepo{dir: dir, st: st}, nil
}

func resetRepo(dir string) (*localRepo, error) {
	if err := removeAll(dir); err != nil {
		return nil, err
	}
	return openRepo(dir)
}

func (r *localRepo) hasCommit(commit string) bool {
	_, err := object.GetCommit(r.st, plumbing.NewHash(commit))
	return err == nil
}

func (r *localRepo) packCount() int {
	packs, err := filepath.Glob(filepath.Join(r.dir, "objects", "pack", "pack-*.pack"))
	if err != nil {
		return 0
	}
	return len(packs)
}

// removeTempPacks drops what a failed fetch left, keeping the objects the open Snapshots need.
func (r *localRepo) removeTempPacks() {
	tmp, _ := filepath.Glob(filepath.Join(r.dir, "objects", "pack", "tmp_pack_*"))
	for _, f := range tmp {
		_ = os.Remove(f)
	}
}

// refCommit is the commit a local ref points at, through an annotated tag.
func (r *localRepo) refCommit(name string) (string, error) {
	ref, err := r.st.Reference(plumbing.ReferenceName(name))
	if err != nil {
		return "", err
	}
	h := ref.Hash()
	if tag, err := object.GetTag(r.st, h); err == nil {
		c, err := tag.Commit()
		if err != nil {
			return "", fmt.Errorf("tag %s does not point at a commit", name)
		}
		return c.Hash.String(), nil
	}
	return h.String(), nil
}

// limitedStorage is the filesystem storage with a cap on the pack data a fetch writes: go-git
// streams every fetched pack through PackfileWriter, over http and ssh alike.
type limitedStorage struct {
	*filesystem.Storage
	max       int64 // pack bytes
	maxObject int64 // inflated bytes of one object
	written   int64
}

func (s *limitedStorage) PackfileWriter() (io.WriteCloser, error) {
	w, err := s.Storage.PackfileWriter()
	if err != nil {
		return nil, err
	}
	return &limitWriter{w: w, s: s, guard: newPackGuard(s.maxObject)}, nil
}

type limitWriter struct {
	w     io.WriteCloser
	s     *limitedStorage
	guard *packGuard
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if l.s.written+int64(len(p)) > l.s.max {
		return 0, &limitError{msg: fmt.Sprintf("the fetch passed its limit of %d bytes (MaxFetchBytes): the repository is too large for this installation's limit", l.s.max)}
	}
	if err := l.guard.check(p); err != nil {
		return 0, err
	}
	n, err := l.w.Write(p)
	l.s.written += int64(n)
	return n, err
}

func (l *limitWriter) Close() error {
	l.guard.close()
	return l.w.Close()
}

// fetch brings one commit into the repository for one ref only, and returns the commit fetched
// (a branch may have moved on since the ls-remote: its new tip is taken), the pack bytes written
// and, for a depth-1 fetch, its size.
//
// When the repository holds an older commit of the ref, the fetch is incremental: no depth, the
// older commit as "have", so the server sends only the commits since and the objects they
// changed (a depth-1 fetch would send the whole tree again: git's upload-pack does not leave out
// what a shallow client has). It stops at fullFetch bytes (a rewritten history would bring more
// than a fresh start) and then, or when the new commit is not a descendant, a depth-1 fetch
// follows.
func (c *Cache) fetch(ctx context.Context, r *localRepo, ep endpoint, repo Repository, auth transport.AuthMethod, want wantedRef, commit string, advertised map[string]string, fullFetch int64) (string, int64, int64, error) {
	st := &limitedStorage{Storage: r.st, max: c.limits.MaxFetchBytes, maxObject: c.limits.MaxObjectBytes}
	var earlier int64 // bytes of an incremental attempt that was given up
	remote := git.NewRemote(st, &config.RemoteConfig{Name: git.DefaultRemoteName, URLs: []string{ep.raw}})
	run := func(specs []config.RefSpec, depth int) error {
		err := remote.FetchContext(ctx, &git.FetchOptions{
			RefSpecs:        specs,
			Depth:           depth,
			Auth:            auth,
			CABundle:        repo.CABundle,
			InsecureSkipTLS: repo.InsecureSkipTLSVerify,
			Tags:            git.NoTags,
			Force:           true,
		})
		if errors.Is(err, git.NoErrAlreadyUpToDate) {
			return nil
		}
		return err
	}
	fail := func(err error) (string, int64, int64, error) {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("%w (FetchTimeout %s): %v", context.DeadlineExceeded, c.limits.FetchTimeout, err)
		}
		return "", earlier + st.written, 0, classify("fetch", ep.String(), auth != nil, err)
	}
	notFound := func(err error) bool {
		return errors.Is(err, git.NoMatchingRefSpecError{}) || strings.Contains(err.Error(), "couldn't find remote ref")
	}

	switch want.kind {
	case refBranch, refTag:
		specs := []config.RefSpec{config.RefSpec("+" + want.full() + ":" + want.full())}
		if _, err := r.refCommit(want.full()); err == nil && fullFetch > 0 {
			st.max = min(c.limits.MaxFetchBytes, fullFetch)
			err := run(specs, 0)
			if err == nil {
				if got, err := r.refCommit(want.full()); err == nil && r.hasCommit(got) {
					return got, st.written, 0, nil
				}
			}
			var lim *limitError
			if err != nil && !errors.As(err, &lim) && !errors.Is(err, plumbing.ErrObjectNotFound) {
				if notFound(err) {
					return "", st.written, 0, &Error{Op: "fetch", Repo: ep.String(), Reason: ReasonRefNotFound, Msg: want.String() + " not found in the repository", Err: err}
				}
				return fail(err)
			}
			r.removeTempPacks()
			earlier, st.written, st.max = st.written, 0, c.limits.MaxFetchBytes
		}
		if err := run(specs, 1); err != nil {
			if notFound(err) {
				return "", earlier + st.written, 0, &Error{Op: "fetch", Repo: ep.String(), Reason: ReasonRefNotFound, Msg: want.String() + " not found in the repository", Err: err}
			}
			return fail(err)
		}
		got, err := r.refCommit(want.full())
		if err != nil {
			return fail(err)
		}
		return got, earlier + st.written, st.written, nil
	}

	// A commit: the ref that advertises it, else the commit itself (servers that allow it),
	// else every branch and tag, whole (bounded by MaxFetchBytes).
	for name, h := range advertised {
		if h == commit && (strings.HasPrefix(name, "refs/heads/") || strings.HasPrefix(name, "refs/tags/")) {
			if err := run([]config.RefSpec{config.RefSpec("+" + name + ":" + name)}, 1); err != nil {
				return fail(err)
			}
			if r.hasCommit(commit) {
				return commit, st.written, st.written, nil
			}
			break
		}
	}
	err := run([]config.RefSpec{config.RefSpec(commit + ":refs/fleet/commit")}, 1)
	if errors.Is(err, git.ErrExactSHA1NotSupported) {
		err = run([]config.RefSpec{"+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"}, 0)
	}
	if err != nil && strings.Contains(err.Error(), "not our ref") {
		return "", st.written, 0, &Error{Op: "fetch", Repo: ep.String(), Reason: ReasonRefNotFound, Msg: fmt.Sprintf("commit %s is not in the repository", commit), Err: err}
	}
	if err != nil {
		return fail(err)
	}
	if !r.hasCommit(commit) {
		return "", st.written, 0, &Error{Op: "fetch", Repo: ep.String(), Reason: ReasonRefNotFound, Msg: fmt.Sprintf("commit %s is not in the repository", commit)}
	}
	return commit, st.written, st.written, nil
}
