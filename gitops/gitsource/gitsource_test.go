package gitsource

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func readFile(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// wantReason fails unless err is an *Error with the reason and a message holding every part.
func wantReason(t *testing.T, err error, reason Reason, parts ...string) *Error {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %s", reason)
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not a *gitsource.Error", err, err)
	}
	if e.Reason != reason {
		t.Fatalf("reason %s, want %s: %v", e.Reason, reason, err)
	}
	t.Logf("%s: %v", reason, err)
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Fatalf("error %q does not say %q", err, p)
		}
	}
	return e
}

func randomContent(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestResolve_BranchTagAndCommit(t *testing.T) {
	s := newServer(t, serverOptions{})
	first := s.commit(map[string]string{"a/cm.yaml": "a: 1\n"})
	runGit(t, s.work, "tag", "light")
	runGit(t, s.work, "tag", "-a", "annotated", "-m", "release")
	runGit(t, s.work, "push", "-q", s.bare, "light", "annotated")
	second := s.commit(map[string]string{"a/cm.yaml": "a: 2\n"})
	runGit(t, s.work, "branch", "-f", "other", first)
	runGit(t, s.work, "push", "-q", s.bare, "other")

	c := newCache(t, Options{ListTTL: time.Hour})
	ctx := testContext(t)
	for _, tc := range []struct {
		name string
		repo Repository
		want string
		ref  string
	}{
		{"branch", Repository{URL: s.url(), Branch: "main"}, second, "refs/heads/main"},
		{"other branch", Repository{URL: s.url(), Branch: "other"}, first, "refs/heads/other"},
		{"lightweight tag", Repository{URL: s.url(), Revision: "light"}, first, "refs/tags/light"},
		{"annotated tag peeled to its commit", Repository{URL: s.url(), Revision: "annotated"}, first, "refs/tags/annotated"},
		{"commit", Repository{URL: s.url(), Revision: first}, first, first},
		{"revision wins over branch", Repository{URL: s.url(), Branch: "main", Revision: "light"}, first, "refs/tags/light"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := c.Resolve(ctx, tc.repo, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			if got.Commit != tc.want || got.Key.Ref != tc.ref {
				t.Fatalf("got %+v, want commit %s ref %s", got, tc.want, tc.ref)
			}
		})
	}
	// One ls-remote answered them all: the same URL and (no) credentials within ListTTL.
	if n := s.infoRefs.Load(); n != 1 {
		t.Fatalf("%d ls-remote requests, want 1 shared answer", n)
	}
	// A caller that needs a newer answer (a webhook, a forced sync) gets one.
	if _, err := c.Resolve(ctx, Repository{URL: s.url(), Branch: "main"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if n := s.infoRefs.Load(); n != 2 {
		t.Fatalf("%d ls-remote requests after a forced resolve, want 2", n)
	}
}

func TestResolve_MissingRefIsNamed(t *testing.T) {
	s := newServer(t, serverOptions{})
	s.commit(map[string]string{"x": "1"})
	runGit(t, s.work, "branch", "release")
	runGit(t, s.work, "push", "-q", s.bare, "release")
	c := newCache(t, Options{})
	ctx := testContext(t)

	_, err := c.Resolve(ctx, Repository{URL: s.url(), Branch: "prod"}, time.Time{})
	wantReason(t, err, ReasonRefNotFound, "branch prod not found", s.hostPort(), "branch main", "branch release")

	_, err = c.Resolve(ctx, Repository{URL: s.url(), Revision: "release"}, time.Time{})
	wantReason(t, err, ReasonRefNotFound, "tag release not found", `a branch "release" exists`)

	_, err = c.Checkout(ctx, Repository{URL: s.url(), Revision: "v9.9.9"}, time.Time{})
	wantReason(t, err, ReasonRefNotFound, "tag v9.9.9 not found")

	_, err = c.Resolve(ctx, Repository{URL: s.url(), Branch: "bad..name"}, time.Time{})
	wantReason(t, err, ReasonInvalid, `branch "bad..name" is not a valid branch name`)

	_, err = c.Resolve(ctx, Repository{URL: s.srv.HTTPAddress() + "/nothing.git"}, time.Time{})
	wantReason(t, err, ReasonNotFound, "nothing")
}

func TestCheckout_SecondCallerOfTheSameKeyMakesNoFetch(t *testing.T) {
	s := newServer(t, serverOptions{})
	commit := s.commit(map[string]string{"apps/web/fleet.yaml": "namespace: web\n", "apps/db/cm.yaml": "kind: ConfigMap\n"})
	c := newCache(t, Options{})
	ctx := testContext(t)
	repo := Repository{URL: s.url(), Branch: "main"}

	first, err := c.Checkout(ctx, repo, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	if first.Commit != commit {
		t.Fatalf("commit %s, want %s", first.Commit, commit)
	}
	if got := readFile(t, first.Dir, "apps/web/fleet.yaml"); got != "namespace: web\n" {
		t.Fatalf("checkout holds %q", got)
	}
	if _, err := os.Stat(filepath.Join(first.Dir, ".git")); !os.IsNotExist(err) {
		t.Fatalf("checkout has a .git: %v", err)
	}
	fetches := s.uploadPacks.Load()
	if fetches != 1 {
		t.Fatalf("%d fetches for the first checkout, want 1", fetches)
	}

	// A second GitRepo on the same repository and branch, after its own ls-remote.
	second, err := c.Checkout(ctx, repo, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if second.Dir != first.Dir || second.Commit != commit {
		t.Fatalf("second checkout %s@%s, want the shared %s@%s", second.Dir, second.Commit, first.Dir, commit)
	}
	if n := s.uploadPacks.Load(); n != fetches {
		t.Fatalf("the second checkout fetched (%d upload-pack requests, want %d)", n, fetches)
	}
	if st := c.Stats(); st.Fetches != 1 || st.Checkouts != 1 {
		t.Fatalf("stats %+v, want one fetch and one checkout", st)
	}
}

func TestCheckout_ConcurrentCallersShareOneFetch(t *testing.T) {
	s := newServer(t, serverOptions{})
	commit := s.commit(map[string]string{"a/cm.yaml": randomContent(t, 64<<10)})
	c := newCache(t, Options{ListTTL: time.Hour})
	ctx := testContext(t)

	const callers = 8
	var wg sync.WaitGroup
	snaps := make([]*Snapshot, callers)
	errs := make([]error, callers)
	for i := range callers {
		wg.Go(func() {
			snaps[i], errs[i] = c.Checkout(ctx, Repository{URL: s.url(), Branch: "main"}, time.Time{})
		})
	}
	wg.Wait()
	for i := range callers {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if snaps[i].Commit != commit || snaps[i].Dir != snaps[0].Dir {
			t.Fatalf("caller %d got %s@%s", i, snaps[i].Dir, snaps[i].Commit)
		}
		defer snaps[i].Close()
	}
	if n := s.uploadPacks.Load(); n != 1 {
		t.Fatalf("%d fetches for %d concurrent callers, want 1", n, callers)
	}
	// One ls-remote for all of them, and the one the fetch starts with.
	if n := s.infoRefs.Load(); n != 2 {
		t.Fatalf("%d info/refs requests for %d concurrent callers, want 2", n, callers)
	}
}

func TestCheckout_NewCommitFetchesOnlyThatCommit(t *testing.T) {
	s := newServer(t, serverOptions{})
	big := randomContent(t, 512<<10) // incompressible: it would dominate a second transfer
	s.commit(map[string]string{"static/blob.bin": big, "app/cm.yaml": "v: 1\n"})
	c := newCache(t, Options{})
	ctx := testContext(t)
	repo := Repository{URL: s.url(), Branch: "main"}

	old, err := c.Checkout(ctx, repo, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	firstBytes := s.bytesOut.Load()
	if firstBytes < 512<<10 {
		t.Fatalf("first fetch sent %d bytes, less than the file", firstBytes)
	}

	second := s.commit(map[string]string{"app/cm.yaml": "v: 2\n"})
	snap, err := c.Checkout(ctx, repo, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	if snap.Commit != second {
		t.Fatalf("commit %s, want %s", snap.Commit, second)
	}
	if got := readFile(t, snap.Dir, "app/cm.yaml"); got != "v: 2\n" {
		t.Fatalf("new checkout holds %q", got)
	}
	if got := readFile(t, snap.Dir, "static/blob.bin"); got != big {
		t.Fatal("the unchanged file differs in the new checkout")
	}
	if n := s.uploadPacks.Load(); n != 2 {
		t.Fatalf("%d fetches, want 2 (one per commit)", n)
	}
	// The second fetch carried the new commit, not the unchanged 512 KiB again.
	if delta := s.bytesOut.Load() - firstBytes; delta > 64<<10 {
		t.Fatalf("the second fetch sent %d bytes: more than the changed file", delta)
	}

	// The old tree stays while a Snapshot holds it, and goes when it is closed.
	if readFile(t, old.Dir, "app/cm.yaml") != "v: 1\n" {
		t.Fatal("the held old tree changed")
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(old.Dir); !os.IsNotExist(err) {
		t.Fatalf("the old tree is still there after Close: %v", err)
	}
}

func TestCheckout_RewrittenHistoryIsFetchedAfresh(t *testing.T) {
	s := newServer(t, serverOptions{})
	first := s.commit(map[string]string{"blob.bin": randomContent(t, 128<<10), "v": "1\n"})
	c := newCache(t, Options{})
	ctx := testContext(t)
	repo := Repository{URL: s.url(), Branch: "main"}
	check := func(wantCommit, wantV string) {
		t.Helper()
		snap, err := c.Checkout(ctx, repo, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		defer snap.Close()
		if snap.Commit != wantCommit || readFile(t, snap.Dir, "v") != wantV {
			t.Fatalf("got %s with v=%q, want %s with %q", snap.Commit, readFile(t, snap.Dir, "v"), wantCommit, wantV)
		}
	}
	check(first, "1\n")
	second := s.commit(map[string]string{"v": "2\n"})
	check(second, "2\n")

	// The branch reset to its parent (which the shallow cache never fetched).
	runGit(t, s.work, "reset", "-q", "--hard", first)
	runGit(t, s.work, "push", "-q", "-f", s.bare, "HEAD:refs/heads/main")
	check(first, "1\n")

	// The branch replaced by an unrelated history.
	runGit(t, s.work, "checkout", "-q", "--orphan", "rewrite")
	runGit(t, s.work, "rm", "-q", "-rf", ".")
	rewritten := s.commit(map[string]string{"v": "new history\n"})
	check(rewritten, "new history\n")
}

func TestCheckout_IsReadOnly(t *testing.T) {
	s := newServer(t, serverOptions{})
	s.commit(map[string]string{"a/b/c.yaml": "c\n", "run.sh": "#!/bin/sh\n"})
	c := newCache(t, Options{})
	snap, err := c.Checkout(testContext(t), Repository{URL: s.url(), Branch: "main"}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	for name, want := range map[string]os.FileMode{".": 0o555, "a": 0o555, "a/b": 0o555, "a/b/c.yaml": 0o444, "run.sh": 0o444} {
		info, err := os.Stat(filepath.Join(snap.Dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode().Perm() != want {
			t.Errorf("%s has mode %v, want %v", name, info.Mode().Perm(), want)
		}
	}
}

func TestCheckout_CommitRevisions(t *testing.T) {
	s := newServer(t, serverOptions{})
	old := s.commit(map[string]string{"v": "old\n"})
	tip := s.commit(map[string]string{"v": "tip\n"})
	ctx := testContext(t)

	t.Run("the tip of a branch is fetched through the branch", func(t *testing.T) {
		c := newCache(t, Options{})
		snap, err := c.Checkout(ctx, Repository{URL: s.url(), Revision: tip}, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		defer snap.Close()
		if readFile(t, snap.Dir, "v") != "tip\n" || snap.Key.Ref != tip {
			t.Fatalf("got %s at %s", readFile(t, snap.Dir, "v"), snap.Key)
		}
	})
	t.Run("an older commit from a server that does not serve commits by SHA", func(t *testing.T) {
		c := newCache(t, Options{})
		snap, err := c.Checkout(ctx, Repository{URL: s.url(), Revision: old}, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		defer snap.Close()
		if readFile(t, snap.Dir, "v") != "old\n" {
			t.Fatalf("got %q", readFile(t, snap.Dir, "v"))
		}
	})
	t.Run("an older commit fetched alone where the server allows it", func(t *testing.T) {
		runGit(t, s.bare, "config", "uploadpack.allowReachableSHA1InWant", "true")
		c := newCache(t, Options{})
		snap, err := c.Checkout(ctx, Repository{URL: s.url(), Revision: old}, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		defer snap.Close()
		if readFile(t, snap.Dir, "v") != "old\n" {
			t.Fatalf("got %q", readFile(t, snap.Dir, "v"))
		}
	})
	t.Run("a commit that is not in the repository", func(t *testing.T) {
		c := newCache(t, Options{})
		_, err := c.Checkout(ctx, Repository{URL: s.url(), Revision: strings.Repeat("ab", 20)}, time.Time{})
		if err == nil {
			t.Fatal("checkout of a missing commit succeeded")
		}
		if r := ReasonOf(err); r != ReasonRefNotFound && r != ReasonFailed {
			t.Fatalf("reason %s: %v", r, err)
		}
		if !strings.Contains(err.Error(), s.hostPort()) {
			t.Fatalf("error %q does not name the repository", err)
		}
	})
}

func TestCheckout_HTTPSBasicAuth(t *testing.T) {
	const user, password = "fleet", "s3cret-passw0rd"
	s := newServer(t, serverOptions{user: user, password: password, tls: true})
	commit := s.commit(map[string]string{"cm.yaml": "x\n"})
	_, _, ca, _ := testCerts(t) // a CA that did not sign the server's certificate
	ctx := testContext(t)
	serverCA := s.ca
	creds := func(data map[string]string) *Credentials {
		t.Helper()
		m := map[string][]byte{}
		for k, v := range data {
			m[k] = []byte(v)
		}
		c, err := ParseCredentials(m)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	t.Run("accepted with the right password and the CA", func(t *testing.T) {
		c := newCache(t, Options{})
		snap, err := c.Checkout(ctx, Repository{URL: s.url(), Branch: "main", CABundle: serverCA,
			Credentials: creds(map[string]string{"username": user, "password": password})}, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		defer snap.Close()
		if snap.Commit != commit {
			t.Fatalf("commit %s, want %s", snap.Commit, commit)
		}
	})
	t.Run("accepted with a token", func(t *testing.T) {
		c := newCache(t, Options{})
		_, err := c.Resolve(ctx, Repository{URL: s.url(), Branch: "main", CABundle: serverCA,
			Credentials: creds(map[string]string{"username": user, "token": password})}, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
	})
	t.Run("refused with a wrong password", func(t *testing.T) {
		c := newCache(t, Options{})
		_, err := c.Checkout(ctx, Repository{URL: s.url(), Branch: "main", CABundle: serverCA,
			Credentials: creds(map[string]string{"username": user, "password": "wrong-" + password})}, time.Time{})
		wantReason(t, err, ReasonAuthFailed, "refused the client Secret's credentials", "127.0.0.1")
		if strings.Contains(err.Error(), password) {
			t.Fatalf("the error shows the password: %v", err)
		}
	})
	t.Run("refused without credentials", func(t *testing.T) {
		c := newCache(t, Options{})
		_, err := c.Resolve(ctx, Repository{URL: s.url(), Branch: "main", CABundle: serverCA}, time.Time{})
		wantReason(t, err, ReasonAuthFailed, "clientSecretName")
	})
	t.Run("a cached commit is not served to a caller whose credentials are refused", func(t *testing.T) {
		c := newCache(t, Options{})
		good, err := c.Checkout(ctx, Repository{URL: s.url(), Branch: "main", CABundle: serverCA,
			Credentials: creds(map[string]string{"username": user, "password": password})}, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		defer good.Close()
		_, err = c.Checkout(ctx, Repository{URL: s.url(), Branch: "main", CABundle: serverCA,
			Credentials: creds(map[string]string{"username": user, "password": "guess"})}, time.Time{})
		wantReason(t, err, ReasonAuthFailed)
		_, err = c.Checkout(ctx, Repository{URL: s.url(), Branch: "main", CABundle: serverCA}, time.Time{})
		wantReason(t, err, ReasonAuthFailed)
	})
	t.Run("an untrusted certificate", func(t *testing.T) {
		c := newCache(t, Options{})
		_, err := c.Resolve(ctx, Repository{URL: s.url(), Branch: "main", CABundle: ca,
			Credentials: creds(map[string]string{"username": user, "password": password})}, time.Time{})
		wantReason(t, err, ReasonTLS, "caBundle")
	})
	t.Run("insecureSkipTLSVerify refused unless the installation allows it", func(t *testing.T) {
		repo := Repository{URL: s.url(), Branch: "main", InsecureSkipTLSVerify: true,
			Credentials: creds(map[string]string{"username": user, "password": password})}
		_, err := newCache(t, Options{}).Resolve(ctx, repo, time.Time{})
		wantReason(t, err, ReasonInvalid, "insecureSkipTLSVerify is not allowed")
		if _, err := newCache(t, Options{AllowInsecureSkipTLSVerify: true}).Resolve(ctx, repo, time.Time{}); err != nil {
			t.Fatalf("allowed insecureSkipTLSVerify: %v", err)
		}
	})
}

func TestCheckout_HTTPBasicAuthOnlyWhenAllowed(t *testing.T) {
	const user, password = "fleet", "pw-over-http"
	s := newServer(t, serverOptions{user: user, password: password})
	s.commit(map[string]string{"cm.yaml": "x\n"})
	creds, err := ParseCredentials(map[string][]byte{"username": []byte(user), "password": []byte(password)})
	if err != nil {
		t.Fatal(err)
	}
	repo := Repository{URL: s.url(), Branch: "main", Credentials: creds}
	ctx := testContext(t)

	_, err = newCache(t, Options{}).Resolve(ctx, repo, time.Time{})
	wantReason(t, err, ReasonInvalid, "clear text", "https://")
	if n := s.infoRefs.Load(); n != 0 {
		t.Fatalf("the refused repository was contacted %d times", n)
	}

	c := newCache(t, Options{AllowHTTPCredentials: true})
	snap, err := c.Checkout(ctx, repo, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	bad, _ := ParseCredentials(map[string][]byte{"username": []byte(user), "password": []byte("nope")})
	_, err = c.Resolve(ctx, Repository{URL: s.url(), Branch: "main", Credentials: bad}, time.Time{})
	wantReason(t, err, ReasonAuthFailed, "refused")
}

func TestSSH_KnownHosts(t *testing.T) {
	s := newServer(t, serverOptions{})
	commit := s.commit(map[string]string{"cm.yaml": "ssh\n"})
	url, knownHosts := s.startSSH()
	key := sshClientKey(t)
	ctx := testContext(t)
	creds := func(kh string) *Credentials {
		t.Helper()
		data := map[string][]byte{SecretSSHPrivateKey: key}
		if kh != "" {
			data[SecretKnownHosts] = []byte(kh)
		}
		c, err := ParseCredentials(data)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	addr := strings.TrimPrefix(s.srv.SSHAddress(), "ssh://git@")

	t.Run("accepted with the server's key in known_hosts", func(t *testing.T) {
		c := newCache(t, Options{})
		snap, err := c.Checkout(ctx, Repository{URL: url, Branch: "main", Credentials: creds(knownHosts)}, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		defer snap.Close()
		if snap.Commit != commit || readFile(t, snap.Dir, "cm.yaml") != "ssh\n" {
			t.Fatalf("got %s", snap.Commit)
		}
		// The same repository over SSH and HTTP are different keys (different identities).
		if !strings.HasPrefix(snap.Key.Repo, "ssh://127.0.0.1:") {
			t.Fatalf("key %s", snap.Key)
		}
	})
	t.Run("an scp-like URL with a port-less host uses the ssh:// form", func(t *testing.T) {
		k, err := KeyOf(Repository{URL: "git@github.com:rancher/fleet-examples.git"})
		if err != nil {
			t.Fatal(err)
		}
		if k.Repo != "ssh://github.com/rancher/fleet-examples" {
			t.Fatalf("key %s", k)
		}
	})
	for _, sameType := range []bool{true, false} {
		t.Run(fmt.Sprintf("refused when known_hosts has another key for the host (same key type: %t)", sameType), func(t *testing.T) {
			c := newCache(t, Options{})
			_, err := c.Checkout(ctx, Repository{URL: url, Branch: "main", Credentials: creds(knownHostsLine(t, addr, otherHostKey(t, sameType)))}, time.Time{})
			wantReason(t, err, ReasonHostKeyMismatch, "known_hosts", "127.0.0.1")
		})
	}
	t.Run("refused when known_hosts does not list the host", func(t *testing.T) {
		c := newCache(t, Options{})
		_, err := c.Resolve(ctx, Repository{URL: url, Branch: "main", Credentials: creds(knownHostsLine(t, "127.0.0.1:1", otherHostKey(t, true)))}, time.Time{})
		wantReason(t, err, ReasonHostKeyUnknown, "not in known_hosts")
	})
	t.Run("no known_hosts is a clear error, not an unverified connection", func(t *testing.T) {
		c := newCache(t, Options{})
		_, err := c.Resolve(ctx, Repository{URL: url, Branch: "main", Credentials: creds("")}, time.Time{})
		wantReason(t, err, ReasonInvalid, "known_hosts", "never accepted unverified")
	})
	t.Run("the installation's known_hosts serves when the Secret has none", func(t *testing.T) {
		c := newCache(t, Options{KnownHosts: []byte(knownHosts)})
		if _, err := c.Resolve(ctx, Repository{URL: url, Branch: "main", Credentials: creds("")}, time.Time{}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("an ssh URL without a key", func(t *testing.T) {
		c := newCache(t, Options{})
		_, err := c.Resolve(ctx, Repository{URL: url, Branch: "main"}, time.Time{})
		wantReason(t, err, ReasonInvalid, SecretSSHPrivateKey)
	})
}

func TestCheckout_FetchSizeLimit(t *testing.T) {
	s := newServer(t, serverOptions{})
	s.commit(map[string]string{"big.bin": randomContent(t, 1<<20)})
	c := newCache(t, Options{Limits: Limits{MaxFetchBytes: 256 << 10}})
	_, err := c.Checkout(testContext(t), Repository{URL: s.url(), Branch: "main"}, time.Time{})
	wantReason(t, err, ReasonLimitExceeded, "MaxFetchBytes", "262144 bytes", "127.0.0.1")
	// Nothing half-fetched stays on disk.
	if st := c.Stats(); st.DiskBytes > 64<<10 {
		t.Fatalf("%d bytes left in the cache after the refused fetch", st.DiskBytes)
	}
	if leftovers, _ := filepath.Glob(filepath.Join(c.opts.Root, "*", "repo", "objects", "pack", "*")); len(leftovers) > 0 {
		t.Fatalf("packs left after the refused fetch: %v", leftovers)
	}
}

func TestCheckout_ObjectSizeLimit(t *testing.T) {
	s := newServer(t, serverOptions{})
	// 8 MiB of zeros is a pack of a few kilobytes: only the object's inflated size shows it.
	s.commit(map[string]string{"small.yaml": "x\n", "bomb.bin": strings.Repeat("\x00", 8<<20)})
	c := newCache(t, Options{Limits: Limits{MaxObjectBytes: 1 << 20}})
	_, err := c.Checkout(testContext(t), Repository{URL: s.url(), Branch: "main"}, time.Time{})
	wantReason(t, err, ReasonLimitExceeded, "MaxObjectBytes", "8388608 bytes", s.hostPort())
	if s.bytesOut.Load() > 1<<20 {
		t.Fatalf("the server sent %d bytes: the pack was not small, the test proves nothing", s.bytesOut.Load())
	}
	// Within the limit, the same repository is fetched.
	snap, err := newCache(t, Options{Limits: Limits{MaxObjectBytes: 16 << 20}}).Checkout(testContext(t), Repository{URL: s.url(), Branch: "main"}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	_ = snap.Close()
}

func TestDeltaSize_ReadsTheTargetSize(t *testing.T) {
	// base size 1000 (0xe8 0x07), target size 300000 (0xe0 0xa7 0x12), then instructions.
	for _, chunks := range [][]string{{"\xe8\x07\xe0\xa7\x12\x90\x01"}, {"\xe8", "\x07\xe0", "\xa7", "\x12rest"}} {
		d := &deltaSize{}
		for _, c := range chunks {
			if _, err := d.Write([]byte(c)); err != nil {
				t.Fatal(err)
			}
		}
		if d.target != 300000 {
			t.Fatalf("target %d from %q", d.target, chunks)
		}
	}
}

func TestCheckout_CheckoutLimits(t *testing.T) {
	s := newServer(t, serverOptions{})
	files := map[string]string{}
	for i := range 5 {
		files[filepath.Join("many", string(rune('a'+i))+".yaml")] = "x\n"
	}
	files["zeros.bin"] = strings.Repeat("\x00", 2<<20) // compresses to almost nothing: only the checkout limit sees it
	s.commit(files)
	ctx := testContext(t)

	_, err := newCache(t, Options{Limits: Limits{MaxCheckoutFiles: 3}}).Checkout(ctx, Repository{URL: s.url(), Branch: "main"}, time.Time{})
	wantReason(t, err, ReasonLimitExceeded, "MaxCheckoutFiles", "3 files")

	c := newCache(t, Options{Limits: Limits{MaxCheckoutBytes: 1 << 20}})
	_, err = c.Checkout(ctx, Repository{URL: s.url(), Branch: "main"}, time.Time{})
	wantReason(t, err, ReasonLimitExceeded, "MaxCheckoutBytes", "zeros.bin")
	if trees, _ := filepath.Glob(filepath.Join(c.opts.Root, "*", "trees", "*")); len(trees) > 0 {
		t.Fatalf("a refused checkout left %v", trees)
	}
}

func TestCheckout_Timeouts(t *testing.T) {
	s := newServer(t, serverOptions{})
	s.commit(map[string]string{"x": "1"})
	ctx := testContext(t)

	s.hang.Store("/git-upload-pack")
	c := newCache(t, Options{Limits: Limits{FetchTimeout: time.Second}})
	start := time.Now()
	_, err := c.Checkout(ctx, Repository{URL: s.url(), Branch: "main"}, time.Time{})
	wantReason(t, err, ReasonTimeout, "FetchTimeout 1s", "127.0.0.1")
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("the fetch gave up after %s", d)
	}

	s.hang.Store("/info/refs")
	c = newCache(t, Options{Limits: Limits{ListTimeout: time.Second}})
	_, err = c.Resolve(ctx, Repository{URL: s.url(), Branch: "main"}, time.Time{})
	wantReason(t, err, ReasonTimeout, "ListTimeout 1s")
}

func TestTreeHashes_ChangeOnlyForChangedPaths(t *testing.T) {
	s := newServer(t, serverOptions{})
	first := s.commit(map[string]string{"apps/web/cm.yaml": "web: 1\n", "apps/db/cm.yaml": "db: 1\n", "README.md": "r\n"})
	c := newCache(t, Options{})
	ctx := testContext(t)
	repo := Repository{URL: s.url(), Branch: "main"}
	paths := []string{"apps/web", "apps/db", ".", "README.md", "apps/missing", "./apps/web/"}
	snap1, err := c.Checkout(ctx, repo, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer snap1.Close()
	h1, err := snap1.TreeHashes(paths)
	if err != nil {
		t.Fatal(err)
	}
	// Exact: git's own tree hashes.
	for _, p := range []string{"apps/web", "apps/db"} {
		if want := strings.TrimSpace(runGit(t, s.work, "rev-parse", first+":"+p)); h1[p] != want {
			t.Fatalf("hash of %s is %s, git says %s", p, h1[p], want)
		}
	}
	if _, ok := h1["apps/missing"]; ok {
		t.Fatal("a missing path has a hash")
	}
	if h1["./apps/web/"] != h1["apps/web"] {
		t.Fatal("the same path written two ways hashes differently")
	}

	s.commit(map[string]string{"apps/db/cm.yaml": "db: 2\n"})
	snap2, err := c.Checkout(ctx, repo, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer snap2.Close()
	h2, err := snap2.TreeHashes(paths)
	if err != nil {
		t.Fatal(err)
	}
	if h2["apps/web"] != h1["apps/web"] || h2["README.md"] != h1["README.md"] {
		t.Fatalf("unchanged paths changed hash: %v → %v", h1, h2)
	}
	if h2["apps/db"] == h1["apps/db"] || h2["."] == h1["."] {
		t.Fatalf("changed paths kept their hash: %v → %v", h1, h2)
	}
	if _, err := snap2.TreeHashes([]string{"../etc"}); ReasonOf(err) != ReasonInvalid {
		t.Fatalf("a path outside the repository: %v", err)
	}
}

func TestCheckout_SymbolicLinksStayInsideTheTree(t *testing.T) {
	ctx := testContext(t)
	link := func(s *server, name, target string) {
		t.Helper()
		p := filepath.Join(s.work, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("links inside the tree become copies", func(t *testing.T) {
		s := newServer(t, serverOptions{})
		s.commit(map[string]string{"common/values.yaml": "shared: true\n", "common/sub/x.yaml": "x\n"})
		link(s, "app/values.yaml", "../common/values.yaml")
		link(s, "app/common", "../common")
		link(s, "alias", "app")
		s.commitWork()
		snap, err := newCache(t, Options{}).Checkout(ctx, Repository{URL: s.url(), Branch: "main"}, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		defer snap.Close()
		for name, want := range map[string]string{"app/values.yaml": "shared: true\n", "app/common/sub/x.yaml": "x\n", "alias/values.yaml": "shared: true\n"} {
			if got := readFile(t, snap.Dir, name); got != want {
				t.Fatalf("%s holds %q", name, got)
			}
			info, err := os.Lstat(filepath.Join(snap.Dir, name))
			if err != nil || info.Mode()&os.ModeSymlink != 0 {
				t.Fatalf("%s is still a link: %v", name, err)
			}
		}
		h, err := snap.TreeHashes([]string{"alias", "app"})
		if err != nil || h["alias"] != h["app"] {
			t.Fatalf("a link to a directory hashes as its target: %v %v", h, err)
		}
	})
	for name, target := range map[string]string{
		"absolute": "/etc/passwd",
		"escaping": "../../../../etc/passwd",
		// Lexically inside (app/../deep/../secret is "secret"), but deep is the root itself.
		"through a link to the root": "../deep/../secret",
	} {
		t.Run("a link "+name+" is refused", func(t *testing.T) {
			s := newServer(t, serverOptions{})
			s.commit(map[string]string{"app/cm.yaml": "x\n"})
			link(s, "deep", ".")
			link(s, "app/leak.yaml", target)
			s.commitWork()
			_, err := newCache(t, Options{}).Checkout(ctx, Repository{URL: s.url(), Branch: "main"}, time.Time{})
			wantReason(t, err, ReasonUnsafeContent, "app/leak.yaml", "outside the repository", s.hostPort())
		})
	}
	t.Run("a loop is refused", func(t *testing.T) {
		s := newServer(t, serverOptions{})
		s.commit(map[string]string{"app/cm.yaml": "x\n"})
		link(s, "app/self", "..")
		s.commitWork()
		_, err := newCache(t, Options{}).Checkout(ctx, Repository{URL: s.url(), Branch: "main"}, time.Time{})
		wantReason(t, err, ReasonUnsafeContent, "app/self", "loop")
	})
}

func TestPrune_RemovesKeysNoGitRepoUses(t *testing.T) {
	s := newServer(t, serverOptions{})
	s.commit(map[string]string{"x": "1"})
	runGit(t, s.work, "branch", "other")
	runGit(t, s.work, "push", "-q", s.bare, "other")
	c := newCache(t, Options{})
	ctx := testContext(t)

	mainSnap, err := c.Checkout(ctx, Repository{URL: s.url(), Branch: "main"}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	otherSnap, err := c.Checkout(ctx, Repository{URL: s.url(), Branch: "other"}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	mainDir := filepath.Join(c.opts.Root, mainSnap.Key.dirName())
	otherDir := filepath.Join(c.opts.Root, otherSnap.Key.dirName())
	stray := filepath.Join(c.opts.Root, "left-by-an-old-process")
	if err := os.MkdirAll(stray, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := mainSnap.Close(); err != nil {
		t.Fatal(err)
	}

	// Only "main" is in use: "other" goes when its Snapshot is closed, the stray directory now.
	if err := c.Prune([]Key{mainSnap.Key}); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{mainDir, otherDir, otherSnap.Dir} {
		if _, err := os.Stat(d); err != nil {
			t.Fatalf("%s was removed while in use: %v", d, err)
		}
	}
	if _, err := os.Stat(stray); !os.IsNotExist(err) {
		t.Fatalf("the stray directory is still there: %v", err)
	}
	if err := otherSnap.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(otherDir); !os.IsNotExist(err) {
		t.Fatalf("the pruned key's directory is still there after its last Close: %v", err)
	}

	// Nothing in use: everything goes; a new process finds nothing to adopt.
	if err := c.Prune(nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(mainDir); !os.IsNotExist(err) {
		t.Fatalf("the unused key's directory is still there: %v", err)
	}
}

func TestCache_ReusesARepositoryAfterRestart(t *testing.T) {
	s := newServer(t, serverOptions{})
	s.commit(map[string]string{"x": "1"})
	root := t.TempDir()
	ctx := testContext(t)
	repo := Repository{URL: s.url(), Branch: "main"}

	snap, err := newCache(t, Options{Root: root}).Checkout(ctx, repo, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	_ = snap.Close()
	s.commit(map[string]string{"y": "2"})

	c := newCache(t, Options{Root: root})
	if _, err := os.Stat(snap.Dir); !os.IsNotExist(err) {
		t.Fatalf("the previous process's checkout was kept: %v", err)
	}
	snap2, err := c.Checkout(ctx, repo, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	defer snap2.Close()
	if readFile(t, snap2.Dir, "x") != "1" || readFile(t, snap2.Dir, "y") != "2" {
		t.Fatal("the new checkout is wrong")
	}
	if st := c.Stats(); st.Fetches != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestCache_DiskCapEvictsIdleRepositories(t *testing.T) {
	s := newServer(t, serverOptions{})
	s.commit(map[string]string{"a.bin": randomContent(t, 300<<10)})
	runGit(t, s.work, "branch", "b")
	runGit(t, s.work, "push", "-q", s.bare, "b")
	runGit(t, s.work, "branch", "c")
	runGit(t, s.work, "push", "-q", s.bare, "c")
	// One entry takes about 600 KiB (pack + checkout): the cap holds one, not two.
	c := newCache(t, Options{Limits: Limits{MaxCacheBytes: 1 << 20}})
	ctx := testContext(t)

	a, err := c.Checkout(ctx, Repository{URL: s.url(), Branch: "main"}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	_ = a.Close()
	b, err := c.Checkout(ctx, Repository{URL: s.url(), Branch: "b"}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(a.Dir); !os.IsNotExist(err) {
		t.Fatalf("the idle entry was not evicted for the new one: %v", err)
	}
	// With b held, a third entry cannot fit: refused with the limit named.
	_, err = c.Checkout(ctx, Repository{URL: s.url(), Branch: "c"}, time.Time{})
	wantReason(t, err, ReasonLimitExceeded, "MaxCacheBytes")
	if readFile(t, b.Dir, "a.bin") == "" {
		t.Fatal("the held checkout was touched")
	}
	_ = b.Close()
}
