package gitsource

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/storage/memory"
)

type refKind int

const (
	refBranch refKind = iota
	refTag
	refCommit
)

// wantedRef is what a Repository asks for: a branch, a tag or a commit.
type wantedRef struct {
	kind refKind
	name string // branch or tag name, or the commit SHA (lower case)
}

func wantedRefOf(repo Repository) (wantedRef, error) {
	if rev := repo.Revision; rev != "" {
		if validCommit(rev) {
			return wantedRef{kind: refCommit, name: strings.ToLower(rev)}, nil
		}
		if err := checkRefName(rev); err != nil {
			return wantedRef{}, fmt.Errorf("revision %q is neither a full commit SHA nor a valid tag name: %v", rev, err)
		}
		return wantedRef{kind: refTag, name: rev}, nil
	}
	branch := repo.Branch
	if branch == "" {
		branch = DefaultBranch
	}
	if err := checkRefName(branch); err != nil {
		return wantedRef{}, fmt.Errorf("branch %q is not a valid branch name: %v", branch, err)
	}
	return wantedRef{kind: refBranch, name: branch}, nil
}

// full is the ref's name on the server (refs/heads/…, refs/tags/…), or the SHA.
func (w wantedRef) full() string {
	switch w.kind {
	case refBranch:
		return "refs/heads/" + w.name
	case refTag:
		return "refs/tags/" + w.name
	}
	return w.name
}

func (w wantedRef) key() string { return w.full() }

func (w wantedRef) String() string {
	switch w.kind {
	case refBranch:
		return "branch " + w.name
	case refTag:
		return "tag " + w.name
	}
	return "commit " + w.name
}

// resolve finds the commit of the ref in an ls-remote answer (tags peeled to their commit). A
// commit SHA is taken as it is: servers advertise only the tips of refs.
func (w wantedRef) resolve(refs map[string]string) (string, error) {
	if w.kind == refCommit {
		return w.name, nil
	}
	if h, ok := refs[w.full()]; ok {
		return h, nil
	}
	msg := fmt.Sprintf("%s not found in the repository", w)
	if w.kind == refTag {
		if _, ok := refs["refs/heads/"+w.name]; ok {
			msg += fmt.Sprintf(" (a branch %q exists: set branch, not revision, to follow it)", w.name)
		}
	}
	if names := nearRefs(refs, w); len(names) > 0 {
		msg += "; it has " + strings.Join(names, ", ")
	}
	return "", fmt.Errorf("%s", msg)
}

// nearRefs lists a few of the repository's refs of the same kind, for an error message.
func nearRefs(refs map[string]string, w wantedRef) []string {
	prefix := "refs/heads/"
	what := "branch "
	if w.kind == refTag {
		prefix, what = "refs/tags/", "tag "
	}
	var names []string
	for name := range refs {
		if strings.HasPrefix(name, prefix) {
			names = append(names, what+strings.TrimPrefix(name, prefix))
		}
	}
	sort.Strings(names)
	if len(names) > 5 {
		names = append(names[:5], fmt.Sprintf("… (%d in all)", len(names)))
	}
	return names
}

// checkRefName applies git's rules for a ref name (git check-ref-format), as Fleet does for
// branches.
func checkRefName(name string) error {
	switch {
	case len(name) > 255:
		return fmt.Errorf("longer than 255 characters")
	case strings.HasPrefix(name, "-"), strings.HasPrefix(name, "."), strings.HasPrefix(name, "/"):
		return fmt.Errorf("starts with %q", name[:1])
	case strings.HasSuffix(name, ".lock"), strings.HasSuffix(name, "/"), strings.HasSuffix(name, "."):
		return fmt.Errorf("has a forbidden ending")
	case name == "@":
		return fmt.Errorf("is %q", name)
	}
	for _, bad := range []string{"..", "//", "?", "*", "[", "@{", "\\", " ", "~", "^", ":"} {
		if strings.Contains(name, bad) {
			return fmt.Errorf("contains %q", bad)
		}
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return fmt.Errorf("contains a control character")
		}
	}
	return nil
}

// prepare checks a Repository against the Cache's rules and builds its go-git auth.
func (c *Cache) prepare(repo Repository) (endpoint, wantedRef, transport.AuthMethod, error) {
	ep, err := parseURL(repo.URL)
	if err != nil {
		return endpoint{}, wantedRef{}, nil, &Error{Op: "ls-remote", Reason: ReasonInvalid, Msg: err.Error()}
	}
	invalid := func(msg string) error {
		return &Error{Op: "ls-remote", Repo: ep.String(), Reason: ReasonInvalid, Msg: msg}
	}
	want, err := wantedRefOf(repo)
	if err != nil {
		return endpoint{}, wantedRef{}, nil, invalid(err.Error())
	}
	if repo.InsecureSkipTLSVerify && !c.opts.AllowInsecureSkipTLSVerify {
		return endpoint{}, wantedRef{}, nil, invalid("insecureSkipTLSVerify is not allowed by this installation: set caBundle to the CA of the server's certificate instead")
	}
	auth, err := authMethod(ep, repo.Credentials, c.opts.KnownHosts, c.tmpDir, c.limits.ListTimeout)
	if err != nil {
		return endpoint{}, wantedRef{}, nil, invalid(err.Error())
	}
	if ep.scheme == "http" && auth != nil && !c.opts.AllowHTTPCredentials {
		return endpoint{}, wantedRef{}, nil, invalid("credentials would be sent in clear text to an http:// URL: use https:// (this installation does not allow credentials over http)")
	}
	return ep, want, auth, nil
}

// listing is one ls-remote answer, shared by the callers with the same listKey.
type listing struct {
	started time.Time
	done    chan struct{}
	refs    map[string]string // ref name → commit; annotated tags peeled
	err     error
}

// listKey: who may share an answer. The same URL with the same credentials and TLS settings
// gets the same answer from the server; anything else asks it again.
func listKey(ep endpoint, repo Repository) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%t\x00", ep.String(), repo.Credentials.fingerprint(), repo.InsecureSkipTLSVerify)
	h.Write(repo.CABundle)
	// The user in an ssh URL is part of the identity the server sees.
	fmt.Fprintf(h, "\x00%s", ep.user)
	return hex.EncodeToString(h.Sum(nil))
}

// Resolve is an ls-remote: the commit the Repository's branch or tag points at now (a commit
// SHA revision is returned as it is, once the server accepted the credentials). Callers with the
// same credentials share one answer asked at or after notBefore and at most ListTTL old; pass
// time.Now() to force a new one (a webhook, a forced sync).
func (c *Cache) Resolve(ctx context.Context, repo Repository, notBefore time.Time) (Resolved, error) {
	ep, want, auth, err := c.prepare(repo)
	if err != nil {
		return Resolved{}, err
	}
	l, err := c.list(ctx, ep, repo, auth, notBefore)
	if err != nil {
		return Resolved{}, err
	}
	commit, err := want.resolve(l.refs)
	if err != nil {
		return Resolved{}, &Error{Op: "ls-remote", Repo: ep.String(), Reason: ReasonRefNotFound, Msg: err.Error()}
	}
	return Resolved{Key: Key{Repo: ep.String(), Ref: want.key()}, Commit: commit}, nil
}

func (c *Cache) list(ctx context.Context, ep endpoint, repo Repository, auth transport.AuthMethod, notBefore time.Time) (*listing, error) {
	lk := listKey(ep, repo)
	now := time.Now()
	c.mu.Lock()
	for k, l := range c.lists {
		if isDone(l) && now.Sub(l.started) > c.opts.ListTTL {
			delete(c.lists, k)
		}
	}
	l := c.lists[lk]
	usable := l != nil && !l.started.Before(notBefore) && (!isDone(l) || now.Sub(l.started) <= c.opts.ListTTL)
	if !usable {
		l = &listing{started: now, done: make(chan struct{})}
		c.lists[lk] = l
		c.mu.Unlock()
		c.lists64.Add(1)
		l.refs, l.err = lsRemote(ctx, ep, repo, auth, c.limits.ListTimeout)
		close(l.done)
	} else {
		c.mu.Unlock()
		select {
		case <-l.done:
		case <-ctx.Done():
			return nil, classify("ls-remote", ep.String(), false, ctx.Err())
		}
	}
	if l.err != nil {
		return nil, l.err
	}
	return l, nil
}

func isDone(l *listing) bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

func lsRemote(ctx context.Context, ep endpoint, repo Repository, auth transport.AuthMethod, timeout time.Duration) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	remote := git.NewRemote(memory.NewStorage(), &config.RemoteConfig{Name: git.DefaultRemoteName, URLs: []string{ep.raw}})
	refs, err := remote.ListContext(ctx, &git.ListOptions{
		Auth:            auth,
		CABundle:        repo.CABundle,
		InsecureSkipTLS: repo.InsecureSkipTLSVerify,
		PeelingOption:   git.AppendPeeled,
	})
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("%w (ListTimeout %s): %v", context.DeadlineExceeded, timeout, err)
		}
		return nil, classify("ls-remote", ep.String(), auth != nil, err)
	}
	out := make(map[string]string, len(refs))
	for _, r := range refs {
		if r.Type() != plumbing.HashReference {
			continue
		}
		name := r.Name().String()
		if base, peeled := strings.CutSuffix(name, "^{}"); peeled {
			out[base] = r.Hash().String()
			continue
		}
		if _, seen := out[name]; !seen {
			out[name] = r.Hash().String()
		}
	}
	return out, nil
}
