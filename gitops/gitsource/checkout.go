package gitsource

import (
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

const (
	// maxSymlinkHops bounds the symbolic links followed to resolve one path (as the kernel's 40).
	maxSymlinkHops = 40
	// maxDepth bounds the directories a checkout nests (symbolic links to directories copy them).
	maxDepth = 64
	// maxSymlinkTarget is the longest symbolic link target read.
	maxSymlinkTarget = 4096
)

// writeTree checks the commit's tree out under the entry's trees/ directory: written to a
// temporary directory, made read-only and renamed into place, so a tree on disk is complete.
func (c *Cache) writeTree(ctx context.Context, r *localRepo, ep endpoint, e *entry, commit string) (string, []string, error) {
	fail := func(err error) (string, []string, error) {
		return "", nil, classify("checkout", ep.String(), false, err)
	}
	treesDir := filepath.Join(e.dir, "trees")
	if err := os.MkdirAll(treesDir, 0o700); err != nil {
		return fail(err)
	}
	final := filepath.Join(treesDir, commit)
	_ = removeAll(final)
	tmp, err := os.MkdirTemp(treesDir, ".tmp-")
	if err != nil {
		return fail(err)
	}
	done := false
	defer func() {
		if !done {
			_ = removeAll(tmp)
		}
	}()

	cm, err := object.GetCommit(r.st, plumbing.NewHash(commit))
	if err != nil {
		return fail(fmt.Errorf("commit %s is not in the cache: %w", commit, err))
	}
	root, err := cm.Tree()
	if err != nil {
		return fail(fmt.Errorf("reading the tree of commit %s: %w", commit, err))
	}
	out, err := os.OpenRoot(tmp)
	if err != nil {
		return fail(err)
	}
	defer out.Close()
	w := &treeWriter{
		ctx:      ctx,
		res:      &resolver{st: r.st, root: root},
		out:      out,
		maxBytes: c.limits.MaxCheckoutBytes,
		maxFiles: c.limits.MaxCheckoutFiles,
	}
	if err := w.write(root, nil, nil); err != nil {
		return fail(err)
	}
	// Read-only: directories last, deepest first.
	for i := len(w.dirs) - 1; i >= 0; i-- {
		if err := out.Chmod(w.dirs[i], 0o555); err != nil {
			return fail(err)
		}
	}
	if err := os.Chmod(tmp, 0o555); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return fail(err)
	}
	done = true
	return final, w.submodules, nil
}

// treeWriter writes a git tree through an os.Root, so no entry name can reach outside the
// checkout, and within the limits.
type treeWriter struct {
	ctx        context.Context
	res        *resolver
	out        *os.Root
	maxBytes   int64
	maxFiles   int
	bytes      int64
	files      int
	dirs       []string
	submodules []string
}

// write writes tree t, which is at src in the commit, to dst in the checkout (dst differs from
// src under a symbolic link to a directory).
func (w *treeWriter) write(t *object.Tree, src, dst []string) error {
	if len(dst) > maxDepth {
		return unsafeContent("%s: directories nest deeper than %d (symbolic links to directories are copied)", strings.Join(dst, "/"), maxDepth)
	}
	for _, ent := range t.Entries {
		if err := w.ctx.Err(); err != nil {
			return err
		}
		if err := checkName(ent.Name); err != nil {
			return fmt.Errorf("%s: %w", path.Join(append(append([]string{}, src...), ent.Name)...), err)
		}
		s := append(append([]string{}, src...), ent.Name)
		d := append(append([]string{}, dst...), ent.Name)
		if err := w.entry(ent.Mode, ent.Hash, s, d); err != nil {
			return err
		}
	}
	return nil
}

func (w *treeWriter) entry(mode filemode.FileMode, hash plumbing.Hash, src, dst []string) error {
	name := strings.Join(dst, "/")
	switch mode {
	case filemode.Dir:
		sub, err := object.GetTree(w.res.st, hash)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if err := w.out.Mkdir(name, 0o755); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		w.dirs = append(w.dirs, name)
		return w.write(sub, src, dst)
	case filemode.Regular, filemode.Executable, filemode.Deprecated:
		return w.file(hash, name)
	case filemode.Symlink:
		n, err := w.res.follow(src[:len(src)-1], hash)
		if err != nil {
			return fmt.Errorf("%s: %w", strings.Join(src, "/"), err)
		}
		if n.mode == filemode.Dir {
			if isPrefix(n.path, dst) {
				return unsafeContent("%s: symbolic link to %q, a directory that contains it (a loop)", strings.Join(src, "/"), "/"+strings.Join(n.path, "/"))
			}
		}
		return w.entry(n.mode, n.hash, n.path, dst)
	case filemode.Submodule:
		w.submodules = append(w.submodules, name)
		if err := w.out.Mkdir(name, 0o755); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		w.dirs = append(w.dirs, name)
		return nil
	}
	return unsafeContent("%s: unknown git file mode %o", name, mode)
}

func (w *treeWriter) file(hash plumbing.Hash, name string) error {
	blob, err := object.GetBlob(w.res.st, hash)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	w.files++
	if w.files > w.maxFiles {
		return &limitError{msg: fmt.Sprintf("the checkout passed its limit of %d files (MaxCheckoutFiles) at %s", w.maxFiles, name)}
	}
	w.bytes += blob.Size
	if w.bytes > w.maxBytes {
		return &limitError{msg: fmt.Sprintf("the checkout passed its limit of %d bytes (MaxCheckoutBytes) at %s (%d bytes)", w.maxBytes, name, blob.Size)}
	}
	rd, err := blob.Reader()
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	defer rd.Close()
	f, err := w.out.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	// The blob's size was counted; never write more than it said.
	_, err = io.Copy(f, io.LimitReader(rd, blob.Size))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// checkName refuses tree entry names git itself refuses (fsck): they could name a path outside
// the directory, or a .git.
func checkName(name string) error {
	switch {
	case name == "", name == ".", name == "..":
		return unsafeContent("invalid name %q in the git tree", name)
	case strings.ContainsAny(name, "/\x00"):
		return unsafeContent("invalid name %q in the git tree", name)
	case strings.EqualFold(name, ".git"):
		return unsafeContent("a tree entry named .git is not allowed")
	}
	return nil
}

func isPrefix(prefix, p []string) bool {
	if len(prefix) > len(p) {
		return false
	}
	for i := range prefix {
		if prefix[i] != p[i] {
			return false
		}
	}
	return true
}

// node is what a path resolves to in a commit's tree.
type node struct {
	mode filemode.FileMode // Dir, or a file mode
	hash plumbing.Hash
	path []string // where it is in the tree, symbolic links resolved
}

// resolver follows paths in a commit's tree as a filesystem would, symbolic links included, but
// never outside the tree.
type resolver struct {
	st   storer.EncodedObjectStorer
	root *object.Tree
}

// follow resolves the symbolic link stored in blob hash, which is in directory dir.
func (r *resolver) follow(dir []string, hash plumbing.Hash) (node, error) {
	hops := 0
	return r.link(dir, hash, &hops)
}

func (r *resolver) link(dir []string, hash plumbing.Hash, hops *int) (node, error) {
	*hops++
	if *hops > maxSymlinkHops {
		return node{}, unsafeContent("more than %d symbolic links to follow (a loop)", maxSymlinkHops)
	}
	blob, err := object.GetBlob(r.st, hash)
	if err != nil {
		return node{}, err
	}
	if blob.Size > maxSymlinkTarget {
		return node{}, unsafeContent("symbolic link target longer than %d bytes", maxSymlinkTarget)
	}
	rd, err := blob.Reader()
	if err != nil {
		return node{}, err
	}
	target, err := io.ReadAll(io.LimitReader(rd, maxSymlinkTarget))
	_ = rd.Close()
	if err != nil {
		return node{}, err
	}
	t := string(target)
	if path.IsAbs(t) {
		return node{}, unsafeContent("symbolic link to %q, outside the repository: only links to files and directories in the repository are followed", t)
	}
	return r.walk(dir, t, hops)
}

// walk resolves rel from directory dir.
func (r *resolver) walk(dir []string, rel string, hops *int) (node, error) {
	stack := append([]string{}, dir...)
	parts := strings.Split(rel, "/")
	for i, p := range parts {
		last := i == len(parts)-1
		switch p {
		case "", ".":
			continue
		case "..":
			if len(stack) == 0 {
				return node{}, unsafeContent("symbolic link to %q, outside the repository: only links to files and directories in the repository are followed", rel)
			}
			stack = stack[:len(stack)-1]
			continue
		}
		t, err := r.treeAt(stack)
		if err != nil {
			return node{}, err
		}
		ent, err := t.FindEntry(p)
		if err != nil {
			return node{}, unsafeContent("symbolic link to %q, which does not exist in the repository", path.Join(append(append([]string{}, stack...), p)...))
		}
		switch ent.Mode {
		case filemode.Dir:
			stack = append(stack, p)
		case filemode.Symlink:
			n, err := r.link(stack, ent.Hash, hops)
			if err != nil {
				return node{}, err
			}
			if n.mode != filemode.Dir {
				if last {
					return n, nil
				}
				return node{}, fmt.Errorf("%q is not a directory", path.Join(n.path...))
			}
			stack = n.path
		case filemode.Submodule:
			return node{}, fmt.Errorf("%q is a submodule, which is not fetched", path.Join(append(append([]string{}, stack...), p)...))
		default:
			if !last {
				return node{}, fmt.Errorf("%q is not a directory", path.Join(append(append([]string{}, stack...), p)...))
			}
			return node{mode: ent.Mode, hash: ent.Hash, path: append(stack, p)}, nil
		}
	}
	t, err := r.treeAt(stack)
	if err != nil {
		return node{}, err
	}
	return node{mode: filemode.Dir, hash: t.Hash, path: stack}, nil
}

// treeAt is the tree at a directory path that holds no symbolic link.
func (r *resolver) treeAt(dir []string) (*object.Tree, error) {
	t := r.root
	for _, p := range dir {
		ent, err := t.FindEntry(p)
		if err != nil || ent.Mode != filemode.Dir {
			return nil, fmt.Errorf("%q is not a directory in the repository", path.Join(dir...))
		}
		if t, err = object.GetTree(r.st, ent.Hash); err != nil {
			return nil, err
		}
	}
	return t, nil
}
