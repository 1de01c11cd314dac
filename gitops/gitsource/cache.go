package gitsource

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-git/go-git/v5/plumbing/transport"
)

// Limits bound what one repository may cost. Zero fields take the defaults.
type Limits struct {
	// ListTimeout bounds one ls-remote (and an SSH connection's dial). Default 30s.
	ListTimeout time.Duration
	// FetchTimeout bounds one fetch and the checkout that follows it. Default 5m.
	FetchTimeout time.Duration
	// MaxFetchBytes is the most pack data one fetch may write. Default 512 MiB.
	MaxFetchBytes int64
	// MaxObjectBytes is the largest object (a file, inflated) a fetch may bring: go-git holds an
	// object whole in memory to index it, so this bounds the fetch's memory. Default 128 MiB.
	MaxObjectBytes int64
	// MaxCheckoutBytes is the most file content one checkout may write. Default 512 MiB.
	MaxCheckoutBytes int64
	// MaxCheckoutFiles is the most files one checkout may write. Default 50,000.
	MaxCheckoutFiles int
	// MaxCacheBytes caps the disk used by all cached repositories and checkouts together.
	// Default 8 GiB.
	MaxCacheBytes int64
}

// DefaultLimits are the limits of a zero Limits.
var DefaultLimits = Limits{
	ListTimeout:      30 * time.Second,
	FetchTimeout:     5 * time.Minute,
	MaxFetchBytes:    512 << 20,
	MaxObjectBytes:   128 << 20,
	MaxCheckoutBytes: 512 << 20,
	MaxCheckoutFiles: 50_000,
	MaxCacheBytes:    8 << 30,
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	if l.ListTimeout > 0 {
		d.ListTimeout = l.ListTimeout
	}
	if l.FetchTimeout > 0 {
		d.FetchTimeout = l.FetchTimeout
	}
	if l.MaxFetchBytes > 0 {
		d.MaxFetchBytes = l.MaxFetchBytes
	}
	if l.MaxObjectBytes > 0 {
		d.MaxObjectBytes = l.MaxObjectBytes
	}
	if l.MaxCheckoutBytes > 0 {
		d.MaxCheckoutBytes = l.MaxCheckoutBytes
	}
	if l.MaxCheckoutFiles > 0 {
		d.MaxCheckoutFiles = l.MaxCheckoutFiles
	}
	if l.MaxCacheBytes > 0 {
		d.MaxCacheBytes = l.MaxCacheBytes
	}
	return d
}

// Options configure a Cache.
type Options struct {
	// Root is the cache directory (created if missing). Everything under it belongs to the Cache.
	Root string
	// Limits bound each repository; zero fields take DefaultLimits.
	Limits Limits
	// ListTTL is how long an ls-remote answer is shared by callers presenting the same
	// credentials (default 5s). Callers that need a newer answer pass a later notBefore.
	ListTTL time.Duration
	// KnownHosts is used for SSH when the client Secret has no known_hosts (the installation's
	// list); empty means the Secret must have one.
	KnownHosts []byte
	// AllowInsecureSkipTLSVerify lets a Repository turn TLS verification off. Off by default:
	// such a Repository is refused.
	AllowInsecureSkipTLSVerify bool
	// AllowHTTPCredentials lets credentials go to an http:// (clear text) URL. Off by default:
	// such a Repository is refused.
	AllowHTTPCredentials bool
}

// DefaultBranch is the branch of a Repository that names neither branch nor revision (Fleet's
// default).
const DefaultBranch = "master"

// Repository is what to read: a GitRepo's repo, branch or revision, and access.
type Repository struct {
	URL string
	// Branch to follow. Ignored when Revision is set.
	Branch string
	// Revision pins a tag or a full commit SHA (40 or 64 hex digits).
	Revision string
	// Credentials from the client Secret; nil for anonymous access.
	Credentials *Credentials
	// CABundle is PEM certificates trusted for https, besides the system's.
	CABundle []byte
	// InsecureSkipTLSVerify turns https verification off; refused unless the Cache allows it.
	InsecureSkipTLSVerify bool
}

// Key is one cache entry: a normalised repository URL and a ref (refs/heads/<branch>,
// refs/tags/<tag> or a commit SHA). Every Repository with the same Key shares one fetch.
type Key struct {
	Repo string
	Ref  string
}

func (k Key) String() string { return k.Repo + "@" + k.Ref }

// dirName is the entry's directory under the root: a hash, so no URL becomes a path.
func (k Key) dirName() string {
	sum := sha256.Sum256([]byte(k.String()))
	return hex.EncodeToString(sum[:12])
}

// Resolved is the answer of an ls-remote for a Repository.
type Resolved struct {
	Key    Key
	Commit string
}

// Stats count what the Cache did, for tests, metrics and the benchmark.
type Stats struct {
	Lists        int64 // ls-remote requests made
	Fetches      int64 // fetches made
	FetchedBytes int64 // pack bytes written by fetches
	Checkouts    int64 // trees written
	DiskBytes    int64 // disk used under the root, as last measured
}

// Cache is the git cache of the source component. It is safe for concurrent use.
type Cache struct {
	opts   Options
	limits Limits
	tmpDir string

	mu      sync.Mutex
	entries map[Key]*entry
	lists   map[string]*listing

	trashN int // guarded by mu

	lists64, fetches, fetchedBytes, checkouts atomic.Int64
}

// entry is one Key's directory: repo/ (a bare, shallow repository) and trees/<commit>.
type entry struct {
	key Key
	dir string

	// mu serialises everything that touches the repository or writes trees: a second caller
	// of the same Key waits and then finds the commit there (one fetch).
	mu sync.Mutex
	// failErr and failAt share a failed fetch with the callers that waited for it.
	failErr error
	failAt  time.Time
	// fullFetch is the size of the last depth-1 fetch: an incremental fetch that would cost
	// more stops there and a depth-1 fetch is made instead. Guarded by mu.
	fullFetch int64

	// Guarded by Cache.mu.
	trees    map[string]*tree
	latest   string
	users    int // Checkout calls in progress
	lastUsed time.Time
	size     int64
	pruned   bool // no GitRepo uses the key: its directory goes when its last Snapshot is closed
}

type tree struct {
	commit     string
	dir        string
	refs       int
	submodules []string
}

// New makes a Cache under opts.Root, keeping the repositories a previous process left there
// and removing its checkouts.
func New(opts Options) (*Cache, error) {
	if opts.Root == "" {
		return nil, fmt.Errorf("gitsource: the cache root is empty")
	}
	if opts.ListTTL <= 0 {
		opts.ListTTL = 5 * time.Second
	}
	c := &Cache{
		opts:    opts,
		limits:  opts.Limits.withDefaults(),
		tmpDir:  filepath.Join(opts.Root, "tmp"),
		entries: map[Key]*entry{},
		lists:   map[string]*listing{},
	}
	if err := os.RemoveAll(c.tmpDir); err != nil {
		return nil, fmt.Errorf("gitsource: cleaning %s: %w", c.tmpDir, err)
	}
	if err := os.MkdirAll(c.tmpDir, 0o700); err != nil {
		return nil, fmt.Errorf("gitsource: making the cache root: %w", err)
	}
	if err := c.adopt(); err != nil {
		return nil, err
	}
	return c, nil
}

const keyFile = "key"

// adopt takes in the entries on disk: their repositories stay (the next fetch needs less), their
// trees go (a tree may be half written).
func (c *Cache) adopt() error {
	dirs, err := os.ReadDir(c.opts.Root)
	if err != nil {
		return fmt.Errorf("gitsource: reading the cache root: %w", err)
	}
	for _, d := range dirs {
		if !d.IsDir() || d.Name() == "tmp" {
			continue
		}
		dir := filepath.Join(c.opts.Root, d.Name())
		raw, err := os.ReadFile(filepath.Join(dir, keyFile))
		repo, ref, ok := strings.Cut(string(raw), "\n")
		key := Key{Repo: repo, Ref: ref}
		if err != nil || !ok || key.dirName() != d.Name() {
			_ = removeAll(dir)
			continue
		}
		_ = removeAll(filepath.Join(dir, "trees"))
		e := &entry{key: key, dir: dir, trees: map[string]*tree{}}
		e.size, _ = diskUsage(dir)
		e.fullFetch = e.size // about what a fresh fetch costs: the cap of an incremental one
		c.entries[key] = e
	}
	return nil
}

// KeyOf is the cache entry a Repository uses.
func KeyOf(repo Repository) (Key, error) {
	ep, err := parseURL(repo.URL)
	if err != nil {
		return Key{}, &Error{Op: "parse", Reason: ReasonInvalid, Msg: err.Error()}
	}
	want, err := wantedRefOf(repo)
	if err != nil {
		return Key{}, &Error{Op: "parse", Repo: ep.String(), Reason: ReasonInvalid, Msg: err.Error()}
	}
	return Key{Repo: ep.String(), Ref: want.key()}, nil
}

// Stats are the counters so far.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	var disk int64
	for _, e := range c.entries {
		disk += e.size
	}
	c.mu.Unlock()
	return Stats{
		Lists:        c.lists64.Load(),
		Fetches:      c.fetches.Load(),
		FetchedBytes: c.fetchedBytes.Load(),
		Checkouts:    c.checkouts.Load(),
		DiskBytes:    disk,
	}
}

// Snapshot is one commit's tree, checked out read-only, held until Close. Snapshots of the
// same commit and Key share one directory.
type Snapshot struct {
	Key    Key
	Commit string
	// Dir is the checkout: read-only files and directories, symbolic links replaced by copies
	// of their in-tree targets, no .git.
	Dir string
	// Submodules are the paths of submodules, which are not fetched (their directories are
	// empty).
	Submodules []string

	c     *Cache
	e     *entry
	t     *tree
	once  sync.Once
	close error
}

// FS is the checkout as an fs.FS.
func (s *Snapshot) FS() fs.FS { return os.DirFS(s.Dir) }

// Close releases the checkout; a tree no Snapshot holds is removed unless it is the Key's
// latest commit.
func (s *Snapshot) Close() error {
	s.once.Do(func() {
		c, e := s.c, s.e
		c.mu.Lock()
		s.t.refs--
		var trash []string
		if e.pruned && e.idleLocked() {
			trash = append(trash, c.dropLocked(e))
		} else if s.t.refs == 0 && s.t.commit != e.latest {
			delete(e.trees, s.t.commit)
			trash = append(trash, c.trashLocked(s.t.dir))
		}
		c.mu.Unlock()
		s.close = c.empty(trash)
		if len(trash) > 0 && !e.pruned {
			c.measure(e)
		}
	})
	return s.close
}

// trashLocked moves a directory out of the way (a rename: nothing can use it after Cache.mu is
// released), to be removed by empty outside the lock. Cache.mu must be held.
func (c *Cache) trashLocked(dir string) string {
	c.trashN++
	to := filepath.Join(c.tmpDir, fmt.Sprintf("trash-%d", c.trashN))
	_ = os.Chmod(dir, 0o700) // a read-only tree cannot move to another directory
	if err := os.Rename(dir, to); err != nil {
		if os.IsNotExist(err) {
			return ""
		}
		return dir // removed in place
	}
	return to
}

// dropLocked takes an idle entry out of the cache and trashes its directory. Cache.mu must be held.
func (c *Cache) dropLocked(e *entry) string {
	if c.entries[e.key] == e {
		delete(c.entries, e.key)
	}
	e.pruned = true
	return c.trashLocked(e.dir)
}

// empty removes trashed directories.
func (c *Cache) empty(dirs []string) error {
	var errs []error
	for _, d := range dirs {
		if d == "" {
			continue
		}
		if err := removeAll(d); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// idleLocked: no Snapshot and no Checkout call holds the entry. Cache.mu must be held.
func (e *entry) idleLocked() bool {
	return e.users == 0 && !e.snapshotsOpenLocked()
}

// snapshotsOpenLocked: a Snapshot holds one of the entry's trees (whose commit the repository
// must keep for TreeHashes). Cache.mu must be held.
func (e *entry) snapshotsOpenLocked() bool {
	for _, t := range e.trees {
		if t.refs > 0 {
			return true
		}
	}
	return false
}

// Checkout resolves the Repository's ref (an ls-remote made with the caller's own credentials,
// or shared with callers presenting the same ones since notBefore), fetches the commit if the
// cache does not hold it, and returns its tree. Close the Snapshot when done with it.
func (c *Cache) Checkout(ctx context.Context, repo Repository, notBefore time.Time) (*Snapshot, error) {
	ep, want, auth, err := c.prepare(repo)
	if err != nil {
		return nil, err
	}
	l, err := c.list(ctx, ep, repo, auth, notBefore)
	if err != nil {
		return nil, err
	}
	commit, err := want.resolve(l.refs)
	if err != nil {
		return nil, &Error{Op: "ls-remote", Repo: ep.String(), Reason: ReasonRefNotFound, Msg: err.Error()}
	}
	key := Key{Repo: ep.String(), Ref: want.key()}

	c.mu.Lock()
	e := c.entries[key]
	if e == nil {
		e = &entry{key: key, dir: filepath.Join(c.opts.Root, key.dirName()), trees: map[string]*tree{}}
		c.entries[key] = e
	}
	e.pruned = false // in use again
	e.users++
	e.lastUsed = time.Now()
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		e.users--
		c.mu.Unlock()
	}()

	ctx, cancel := context.WithTimeout(ctx, c.limits.FetchTimeout)
	defer cancel()
	return c.materialise(ctx, e, ep, repo, auth, want, commit, l.refs)
}

// materialise makes sure the commit is in the entry's repository and its tree on disk.
func (c *Cache) materialise(ctx context.Context, e *entry, ep endpoint, repo Repository, auth transport.AuthMethod, want wantedRef, commit string, advertised map[string]string) (*Snapshot, error) {
	start := time.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.failAt.After(start) {
		return nil, e.failErr
	}
	if s := c.hold(e, commit); s != nil {
		return s, nil
	}
	if err := os.MkdirAll(e.dir, 0o700); err != nil {
		return nil, &Error{Op: "fetch", Repo: ep.String(), Reason: ReasonFailed, Msg: "making the cache directory: " + err.Error(), Err: err}
	}
	if err := os.WriteFile(filepath.Join(e.dir, keyFile), []byte(e.key.Repo+"\n"+e.key.Ref), 0o600); err != nil {
		return nil, &Error{Op: "fetch", Repo: ep.String(), Reason: ReasonFailed, Msg: "writing the cache key: " + err.Error(), Err: err}
	}
	r, err := openRepo(filepath.Join(e.dir, "repo"))
	if err != nil {
		return nil, &Error{Op: "fetch", Repo: ep.String(), Reason: ReasonFailed, Msg: "opening the cache: " + err.Error(), Err: err}
	}
	if !r.hasCommit(commit) {
		c.mu.Lock()
		held := e.snapshotsOpenLocked()
		c.mu.Unlock()
		if r.packCount() > maxPacks && !held {
			// Many shallow fetches left many packs: start again from the one commit.
			if r, err = resetRepo(filepath.Join(e.dir, "repo")); err != nil {
				return nil, &Error{Op: "fetch", Repo: ep.String(), Reason: ReasonFailed, Msg: "resetting the cache: " + err.Error(), Err: err}
			}
		}
		fetched, written, full, err := c.fetch(ctx, r, ep, repo, auth, want, commit, advertised, e.fullFetch)
		c.fetches.Add(1)
		c.fetchedBytes.Add(written)
		if full > 0 {
			e.fullFetch = full
		}
		if err != nil {
			c.mu.Lock()
			held := e.snapshotsOpenLocked()
			c.mu.Unlock()
			if held {
				r.removeTempPacks()
			} else {
				_ = removeAll(filepath.Join(e.dir, "repo"))
			}
			e.failErr, e.failAt = err, time.Now()
			return nil, err
		}
		commit = fetched
		if s := c.hold(e, commit); s != nil {
			return s, nil
		}
	}

	dir, submodules, err := c.writeTree(ctx, r, ep, e, commit)
	if err != nil {
		return nil, err
	}
	c.checkouts.Add(1)
	c.mu.Lock()
	t := &tree{commit: commit, dir: dir, refs: 1, submodules: submodules}
	e.trees[commit] = t
	e.latest = commit
	var stale []string
	for k, old := range e.trees {
		if k != commit && old.refs == 0 {
			delete(e.trees, k)
			stale = append(stale, c.trashLocked(old.dir))
		}
	}
	c.mu.Unlock()
	_ = c.empty(stale)
	s := &Snapshot{Key: e.key, Commit: commit, Dir: dir, Submodules: submodules, c: c, e: e, t: t}
	if err := c.enforceDiskCap(e); err != nil {
		// The tree does not stay: it is over the cap.
		c.mu.Lock()
		e.latest = ""
		c.mu.Unlock()
		_ = s.Close()
		return nil, &Error{Op: "checkout", Repo: ep.String(), Reason: ReasonLimitExceeded, Msg: err.Error()}
	}
	return s, nil
}

// hold returns a Snapshot of a tree already on disk, or nil.
func (c *Cache) hold(e *entry, commit string) *Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := e.trees[commit]
	if t == nil {
		return nil
	}
	t.refs++
	return &Snapshot{Key: e.key, Commit: commit, Dir: t.dir, Submodules: t.submodules, c: c, e: e, t: t}
}

// maxPacks is how many packs shallow fetches may pile up in one entry before it is fetched
// afresh.
const maxPacks = 16

// enforceDiskCap measures the entry and, when all entries together pass the cap, removes the
// least recently used idle entries. It fails when the cap is still passed.
func (c *Cache) enforceDiskCap(current *entry) error {
	c.measure(current)
	c.mu.Lock()
	var total int64
	var idle []*entry
	for _, e := range c.entries {
		total += e.size
		if e != current && e.idleLocked() {
			idle = append(idle, e)
		}
	}
	sort.Slice(idle, func(i, j int) bool { return idle[i].lastUsed.Before(idle[j].lastUsed) })
	var trash []string
	for _, e := range idle {
		if total <= c.limits.MaxCacheBytes {
			break
		}
		trash = append(trash, c.dropLocked(e))
		total -= e.size
	}
	c.mu.Unlock()
	_ = c.empty(trash)
	if total > c.limits.MaxCacheBytes {
		return fmt.Errorf("the git cache uses %d bytes, over its cap of %d bytes (MaxCacheBytes) with every other repository in use: raise the cap or split the GitRepos", total, c.limits.MaxCacheBytes)
	}
	return nil
}

func (c *Cache) measure(e *entry) {
	size, _ := diskUsage(e.dir)
	c.mu.Lock()
	e.size = size
	c.mu.Unlock()
}

// Prune removes every entry whose Key is not in inUse: at once when no Snapshot holds it, else
// when its last Snapshot is closed (a Checkout of the Key in the meantime keeps it). Directories
// under the root that belong to no entry go too.
func (c *Cache) Prune(inUse []Key) error {
	keep := map[Key]bool{}
	for _, k := range inUse {
		keep[k] = true
	}
	dirs, err := os.ReadDir(c.opts.Root)
	if err != nil {
		return fmt.Errorf("gitsource: reading the cache root: %w", err)
	}
	c.mu.Lock()
	var trash []string
	owned := map[string]bool{"tmp": true}
	for k, e := range c.entries {
		switch {
		case keep[k]:
		case e.idleLocked():
			trash = append(trash, c.dropLocked(e))
			continue
		default:
			e.pruned = true
		}
		owned[k.dirName()] = true
	}
	for _, d := range dirs {
		if !owned[d.Name()] {
			trash = append(trash, c.trashLocked(filepath.Join(c.opts.Root, d.Name())))
		}
	}
	c.mu.Unlock()
	return c.empty(trash)
}

// removeAll removes a directory tree, read-only directories included.
func removeAll(dir string) error {
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(dir)
}

func diskUsage(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n, err
}

// validCommit: a full SHA-1 or SHA-256 commit ID, as Fleet accepts for revision.
func validCommit(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for _, r := range s {
		if !strings.ContainsRune("0123456789abcdefABCDEF", r) {
			return false
		}
	}
	return true
}
