// Package bundlereader turns a checked-out directory tree into Bundles, as
// Fleet's `fleet apply` does: which directories become Bundles (fleet.yaml,
// or manifests without one), .fleetignore, fleet.yaml (strictly decoded),
// Bundle names and labels, resources and their encoding, and the GitRepo's
// options (targets, namespace, service account, ...). It reads files only:
// no network, no cluster. Charts from repositories come through a
// ChartFetcher given by the caller (the source component's). One path's
// mistake is that path's error; the other paths still give their Bundles.
package bundlereader

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/bundlecontent"
	"github.com/gitops-fleet/fleet/internal/config"
)

// The labels fleet apply sets on every Bundle, as Fleet does, are
// fleet.RepoLabel (fleet apply prunes by it) and fleet.CommitLabel.

// Options are the GitRepo-level options of fleet apply (its flags).
type Options struct {
	// Namespace of the Bundles (the GitRepo's).
	Namespace string
	// Labels are added to every Bundle (--label); a fleet.yaml's labels
	// win over them, fleet.RepoLabel and fleet.CommitLabel win over both.
	Labels map[string]string
	// Commit is the fleet.CommitLabel value (empty: no label).
	Commit string
	// ServiceAccount, when set, replaces every Bundle's serviceAccount.
	ServiceAccount string
	// TargetNamespace, when set, is every Bundle's and target's namespace.
	TargetNamespace string
	// Paused, KeepResources and DeleteNamespace, when true, are set on
	// every Bundle.
	Paused, KeepResources, DeleteNamespace bool
	// SyncGeneration is every Bundle's forceSyncGeneration (as Fleet: it
	// replaces what fleet.yaml says, also with 0).
	SyncGeneration int64
	// CorrectDrift, when enabled, replaces every Bundle's correctDrift.
	CorrectDrift *fleet.CorrectDrift
	// Targets and TargetRestrictions are the GitRepo's targets (see
	// GitRepoTargets, ReadTargetsFile), appended after a fleet.yaml's
	// targetCustomizations unless it has overrideTargets.
	Targets            []fleet.BundleTarget
	TargetRestrictions []fleet.BundleTargetRestriction
	// Compress stores every resource base64+gz (else only binary files,
	// and all of them when the Bundle would be 1 MB or more, as Fleet).
	Compress bool
	// Charts fetches charts named by helm.repo or a URL in helm.chart; nil:
	// such a path fails with an error naming the field.
	Charts ChartFetcher
	// Limits bound what one path may read (zero fields: the defaults).
	Limits Limits
	// Concurrency is how many paths are read at once (0: 4, Fleet's
	// default).
	Concurrency int
}

// Limits bound what the reader reads, so a huge or hostile repository gets
// an error for its path, not the reader's memory.
type Limits struct {
	// FileBytes bounds one file (default: the controller's default
	// bundleMaxResourceSize, 16 MiB).
	FileBytes int64
	// PathBytes bounds all files of one Bundle together, charts included
	// (default: the controller's default bundleMaxSize, 32 MiB).
	PathBytes int64
	// Files bounds the number of files of one Bundle (default 10000).
	Files int
	// BundleBytes bounds a Bundle as JSON, after encoding
	// (default 64 MiB, what a Bundle's contents Secrets hold: resources
	// over 1 MiB are written as contents, internal/bundlecontents).
	BundleBytes int64
	// ScanEntries bounds the directory entries one GitRepo path's scan
	// for Bundle directories visits (default 100000).
	ScanEntries int
}

// DefaultLimits are the limits of zero Limits fields.
func DefaultLimits() Limits {
	return Limits{
		FileBytes:   config.DefaultBundleMaxResourceSize,
		PathBytes:   config.DefaultBundleMaxSize,
		Files:       10000,
		BundleBytes: bundlecontent.MaxManifestBytes,
		ScanEntries: 100000,
	}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.FileBytes <= 0 {
		l.FileBytes = d.FileBytes
	}
	if l.PathBytes <= 0 {
		l.PathBytes = d.PathBytes
	}
	if l.Files <= 0 {
		l.Files = d.Files
	}
	if l.BundleBytes <= 0 {
		l.BundleBytes = d.BundleBytes
	}
	if l.ScanEntries <= 0 {
		l.ScanEntries = d.ScanEntries
	}
	return l
}

// Bundle is one Bundle read and where it came from.
type Bundle struct {
	// Path is the directory, relative to the checkout ("." its root).
	Path string
	// Bundle is the Bundle, with apiVersion and kind set.
	Bundle *fleet.Bundle
	// ChartDigests are the digests of the fetched charts it embeds, in
	// order (for change detection: the tree's hash says nothing of them).
	ChartDigests []string
}

// PathError is the failure of one path: a GitRepo path (a glob) that
// matches nothing usable, or a Bundle directory whose fleet.yaml, values
// files, charts or size are wrong. Err often is a *FieldError (or several,
// joined) naming file, line and field.
type PathError struct {
	Path string
	Err  error
}

func (e *PathError) Error() string { return e.Path + ": " + e.Err.Error() }
func (e *PathError) Unwrap() error { return e.Err }

// Result is what Read read: the Bundles of the paths that succeeded and
// the errors of those that did not.
type Result struct {
	// Bundles, by name.
	Bundles []Bundle
	// Errors, by path.
	Errors []*PathError
	// Empty are Bundle directories without resources, left out as Fleet
	// does (not errors).
	Empty []string
}

// Complete says every path gave its Bundles: only then may Bundles of the
// GitRepo that were not read be pruned.
func (r *Result) Complete() bool { return len(r.Errors) == 0 }

// Read reads the Bundles of GitRepo repo (its name) from the checkout at
// root: every directory under paths (globs, relative to root; none: the
// root) that holds a fleet.yaml, and a path's own directory when it holds
// manifests no fleet.yaml directory takes. An error is an argument that
// cannot be read at all (root, repo); a path's failure is in the Result.
func Read(ctx context.Context, root, repo string, paths []string, opts Options) (*Result, error) {
	if repo == "" {
		return nil, errors.New("the GitRepo name (fleet apply's NAME) is empty")
	}
	if st, err := os.Stat(root); err != nil {
		return nil, fmt.Errorf("the checkout %s: %w", root, err)
	} else if !st.IsDir() {
		return nil, fmt.Errorf("the checkout %s is not a directory", root)
	}
	if len(paths) == 0 {
		paths = []string{"."}
	}
	r := &reader{root: root, repo: repo, opts: opts, limits: opts.Limits.withDefaults()}
	res := &Result{}
	var dirs []string
	seen := map[string]bool{}
	for _, p := range paths {
		found, err := r.scan(ctx, p)
		if err != nil {
			res.Errors = append(res.Errors, &PathError{Path: p, Err: err})
			continue
		}
		for _, d := range found {
			if !seen[d] {
				seen[d] = true
				dirs = append(dirs, d)
			}
		}
	}

	type outcome struct {
		b   *Bundle
		err error
	}
	out := make([]outcome, len(dirs))
	conc := opts.Concurrency
	if conc <= 0 {
		conc = 4
	}
	sem := make(chan struct{}, conc)
	var wg sync.WaitGroup
	for i, d := range dirs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				out[i].err = ctx.Err()
				return
			}
			defer func() { <-sem }()
			out[i].b, out[i].err = r.readBundle(ctx, d)
		}()
	}
	wg.Wait()

	byName := map[string]string{}
	for i, d := range dirs {
		switch o := out[i]; {
		case o.err != nil:
			res.Errors = append(res.Errors, &PathError{Path: d, Err: o.err})
		case o.b == nil:
			res.Empty = append(res.Empty, d)
		case byName[o.b.Bundle.Name] != "":
			res.Errors = append(res.Errors, &PathError{Path: d, Err: fmt.Errorf("its Bundle name %q is also the Bundle of %s; give one of them another name in fleet.yaml", o.b.Bundle.Name, byName[o.b.Bundle.Name])})
		default:
			byName[o.b.Bundle.Name] = d
			res.Bundles = append(res.Bundles, *o.b)
		}
	}
	if len(res.Bundles) == 0 && len(res.Errors) == 0 {
		// Fleet refuses this too: an empty checkout must not prune all.
		res.Errors = append(res.Errors, &PathError{Path: strings.Join(paths, ","), Err: errors.New("no resources found to deploy")})
	}
	sort.Slice(res.Bundles, func(i, j int) bool { return res.Bundles[i].Bundle.Name < res.Bundles[j].Bundle.Name })
	sort.SliceStable(res.Errors, func(i, j int) bool { return res.Errors[i].Path < res.Errors[j].Path })
	return res, nil
}

type reader struct {
	root, repo string
	opts       Options
	limits     Limits
}

// abs is the directory rel of the checkout on disk.
func (r *reader) abs(rel string) string { return filepath.Join(r.root, filepath.FromSlash(rel)) }

// scan returns the Bundle directories under GitRepo path p (a glob), as
// Fleet's fleet apply finds them: every directory holding a fleet.yaml
// (or fleet.yml), and a matched directory itself when it holds a fleet.yaml
// or manifests that no fleet.yaml directory below takes. .git is skipped.
func (r *reader) scan(ctx context.Context, p string) ([]string, error) {
	clean := path.Clean(strings.TrimLeft(filepath.ToSlash(p), "/"))
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return nil, errors.New("a path must stay inside the repository")
	}
	matches, err := filepath.Glob(filepath.Join(globEscape.ReplaceAllString(r.root, `\$1`), filepath.FromSlash(clean)))
	if err != nil {
		return nil, fmt.Errorf("not a valid path glob: %w", err)
	}
	var bases []string
	for _, m := range matches {
		rel, err := filepath.Rel(r.root, m)
		if err != nil {
			continue
		}
		rel = filepath.ToSlash(rel)
		st, err := os.Lstat(m)
		if err != nil {
			return nil, err
		}
		if st.Mode()&os.ModeSymlink != 0 {
			return nil, fmt.Errorf("%s is a symbolic link; paths must be directories of the repository", rel)
		}
		if st.IsDir() {
			bases = append(bases, rel)
		}
	}
	if len(bases) == 0 {
		return nil, errors.New("matches no directory of the repository (a directory removed from git must leave the GitRepo's paths too; nothing is pruned until every path reads)")
	}
	var dirs []string
	entries := 0
	for _, base := range bases {
		err := filepath.WalkDir(r.abs(base), func(abs string, e os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if entries++; entries > r.limits.ScanEntries {
				return fmt.Errorf("more than %d files and directories under it; split the path", r.limits.ScanEntries)
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			if !e.IsDir() {
				return nil
			}
			if e.Name() == ".git" {
				return filepath.SkipDir
			}
			rel, _ := filepath.Rel(r.root, abs)
			rel = filepath.ToSlash(rel)
			if rel == base {
				if hasFleetYAML(abs) {
					dirs = append(dirs, rel)
					return nil
				}
				ok, err := hasLooseManifests(abs, 0)
				if err != nil {
					return err
				}
				if ok {
					dirs = append(dirs, rel)
				}
				return nil
			}
			if hasFleetYAML(abs) {
				dirs = append(dirs, rel)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return dirs, nil
}

// globEscape finds the characters of the checkout's own path that Glob
// would take for patterns.
var globEscape = regexp.MustCompile(`([*?[\\])`)

// fleetYAMLNames are the names of a Bundle directory's options file, the
// first found wins.
var fleetYAMLNames = []string{"fleet.yaml", "fleet.yml"}

func hasFleetYAML(dir string) bool {
	for _, n := range fleetYAMLNames {
		if st, err := os.Stat(filepath.Join(dir, n)); err == nil && !st.IsDir() {
			return true
		}
	}
	return false
}

// hasLooseManifests says dir holds a .yaml or .yml file, itself or in a
// subdirectory without a fleet.yaml (Fleet's rule for a path without
// fleet.yaml to become a Bundle).
func hasLooseManifests(dir string, depth int) (bool, error) {
	if hasFleetYAML(dir) {
		return false, nil
	}
	if depth > 64 {
		return false, errors.New("directories nested deeper than 64 levels")
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false, err
	}
	for _, e := range entries {
		if e.IsDir() {
			if e.Name() == ".git" {
				continue
			}
			ok, err := hasLooseManifests(filepath.Join(dir, e.Name()), depth+1)
			if ok || err != nil {
				return ok, err
			}
			continue
		}
		if ext := path.Ext(e.Name()); ext == ".yaml" || ext == ".yml" {
			return true, nil
		}
	}
	return false, nil
}
