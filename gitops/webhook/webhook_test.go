package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/controlplane"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/gitops/webhook/payload"
	"github.com/gitops-fleet/fleet/gitops/webhook/webhooktest"
)

// The suite: a real API server, a manager with the receiver on a real
// listener (its GitRepo index in the manager's cache, Secrets read
// uncached as `fleet gitops` reads them), and the triggers it made.
var (
	env      *controlplane.Env
	suite    *testenv.Suite
	endpoint string        // http://127.0.0.1:<port>/
	cached   client.Client // the manager's client
	triggers = &triggerLog{}
	reads    = &readLog{}
)

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.Options{ControlPlanes: &controlplane.Options{NoControllerManager: true}, CaptureLogs: true}, func(s *testenv.Suite) error {
		env, suite = s.Env, s
		mgr, err := ctrl.NewManager(env.Upstream.Config, testenv.ManagerOptions(nil))
		if err != nil {
			return err
		}
		cached = mgr.GetClient()
		if err := IndexGitRepos(s.Context(), mgr.GetFieldIndexer()); err != nil {
			return err
		}
		rc, err := New(Options{
			Client:    mgr.GetClient(),
			APIReader: &recordingReader{Reader: mgr.GetAPIReader(), log: reads},
			Trigger:   triggers.trigger,
			Log:       mgr.GetLogger().WithName("webhook"),
		})
		if err != nil {
			return err
		}
		addr := make(chan net.Addr, 1)
		srv := NewServer("127.0.0.1:0", rc)
		srv.listening = func(a net.Addr) { addr <- a }
		if err := mgr.Add(srv); err != nil {
			return err
		}
		s.Go("manager", mgr.Start)
		select {
		case a := <-addr:
			endpoint = "http://" + a.String() + "/"
		case <-time.After(2 * time.Minute):
			return fmt.Errorf("the webhook server did not listen within 2 minutes")
		}
		return nil
	})
}

// triggerLog records the receiver's triggers.
type triggerLog struct {
	mu sync.Mutex
	n  map[types.NamespacedName]int
}

func (l *triggerLog) trigger(key types.NamespacedName, _ string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n == nil {
		l.n = map[types.NamespacedName]int{}
	}
	l.n[key]++
}

func (l *triggerLog) count(ns, name string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n[types.NamespacedName{Namespace: ns, Name: name}]
}

// readLog records the Secrets the receiver read.
type readLog struct {
	mu    sync.Mutex
	names []string
}

func (l *readLog) inNamespace(ns string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, n := range l.names {
		if strings.HasPrefix(n, ns+"/") {
			out = append(out, n)
		}
	}
	return out
}

// recordingReader reads through the manager's API reader and records
// which Secrets were read.
type recordingReader struct {
	client.Reader
	log *readLog
}

func (r *recordingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*corev1.Secret); ok {
		r.log.mu.Lock()
		r.log.names = append(r.log.names, key.String())
		r.log.mu.Unlock()
	}
	return r.Reader.Get(ctx, key, obj, opts...)
}

func newSecret(t *testing.T, ns, name, value string) {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: webhooktest.SecretData(value)}
	if err := env.Upstream.Client.Create(t.Context(), s); err != nil {
		t.Fatal(err)
	}
}

func newGitRepo(t *testing.T, ns, name, repo, branch, secret string) {
	t.Helper()
	g := &fleet.GitRepo{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: fleet.GitRepoSpec{Repo: repo, Branch: branch, WebhookSecret: secret}}
	if err := env.Upstream.Client.Create(t.Context(), g); err != nil {
		t.Fatal(err)
	}
}

// waitIndexed waits until the manager's cache finds the GitRepo by its
// repository, as the receiver looks it up.
func waitIndexed(t *testing.T, ns, name string) {
	t.Helper()
	var g fleet.GitRepo
	if err := env.Upstream.Client.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: name}, &g); err != nil {
		t.Fatal(err)
	}
	key := payload.RepoKey(g.Spec.Repo)
	testenv.Eventually(t, 30*time.Second, "GitRepo "+ns+"/"+name+" in the cache's index", func() error {
		var list fleet.GitRepoList
		if err := cached.List(t.Context(), &list, client.InNamespace(ns), client.MatchingFields{RepoIndex: key}); err != nil {
			return err
		}
		for _, x := range list.Items {
			if x.Name == name {
				return nil
			}
		}
		return fmt.Errorf("not indexed under %q yet", key)
	})
}

// post sends a webhook and returns the status code and decoded answer.
func post(t *testing.T, hk webhooktest.Hook) (int, Answer, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, endpoint, bytes.NewReader(hk.Body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = hk.Header.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var a Answer
	if err := json.Unmarshal(raw, &a); err != nil {
		t.Fatalf("answer %d is not JSON: %q", resp.StatusCode, raw)
	}
	return resp.StatusCode, a, string(raw)
}

// postUntil posts hk until its answer has code (the cache may not have
// seen a GitRepo just created) and returns the answer.
func postUntil(t *testing.T, hk webhooktest.Hook, code int) Answer {
	t.Helper()
	var a Answer
	testenv.Eventually(t, 30*time.Second, fmt.Sprintf("a %s webhook answered %d", hk.Provider, code), func() error {
		got, ans, raw := post(t, hk)
		a = ans
		if got != code {
			return fmt.Errorf("answered %d: %s", got, raw)
		}
		return nil
	})
	return a
}

func gitRepoStatus(t *testing.T, ns, name string) fleet.GitRepoStatus {
	t.Helper()
	var g fleet.GitRepo
	if err := env.Upstream.Client.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: name}, &g); err != nil {
		t.Fatal(err)
	}
	return g.Status
}

// TestWebhook_SignedPushTriggersExactlyTheMatchingGitRepos: for every
// provider, a push signed with the GitRepos' webhook secret triggers the
// GitRepos of that repository and branch (named by its https or its ssh
// URL) and records the webhook in their status; a GitRepo of another
// branch, of another repository, or without webhookSecret is not
// triggered; a wrong or missing signature is 401 and triggers nothing.
// No answer names a GitRepo, and only the Secrets of the repository's
// GitRepos are read.
func TestWebhook_SignedPushTriggersExactlyTheMatchingGitRepos(t *testing.T) {
	for _, provider := range webhooktest.Providers {
		t.Run(provider, func(t *testing.T) {
			ns := testenv.Namespace(t, env.Upstream.Client, "webhook-"+provider+"-")
			// A repository of this test's own (the suite's GitRepos of
			// other tests and runs name others).
			https, ssh := strings.ReplaceAll(webhooktest.RepoURLs[provider][0], "/app", "/"+ns), strings.ReplaceAll(webhooktest.RepoURLs[provider][1], "/app", "/"+ns)
			newSecret(t, ns, "hook", "s3cr3t-"+provider)
			newSecret(t, ns, "unused", "s3cr3t-"+provider)
			newGitRepo(t, ns, "by-https", https, "main", "hook")
			newGitRepo(t, ns, "by-ssh", ssh, "main", "hook")
			newGitRepo(t, ns, "other-branch", https, "dev", "hook")
			newGitRepo(t, ns, "other-repo", https+"-other", "main", "unused")
			newGitRepo(t, ns, "no-secret", https, "main", "")
			for _, n := range []string{"by-https", "by-ssh", "other-branch", "other-repo"} {
				waitIndexed(t, ns, n)
			}
			push := webhooktest.Fixture(provider, https, "refs/heads/main", webhooktest.CommitA)
			unauthorized := testutil.ToFloat64(webhooksTotal.WithLabelValues(provider, resultUnauthorized))

			// Refused: a wrong signature, none at all.
			for what, hk := range map[string]webhooktest.Hook{"a wrong secret": push.Signed("wrong"), "no signature": push} {
				code, a, raw := post(t, hk)
				if code != http.StatusUnauthorized || a.Triggered != 0 {
					t.Errorf("%s: answered %d %s, want 401 and nothing triggered", what, code, raw)
				}
			}
			if got := testutil.ToFloat64(webhooksTotal.WithLabelValues(provider, resultUnauthorized)); got != unauthorized+2 {
				t.Errorf("fleet_gitops_webhooks_total{provider=%q,result=unauthorized} went from %v to %v, want +2", provider, unauthorized, got)
			}

			a := postUntil(t, push.Signed("s3cr3t-"+provider), http.StatusAccepted)
			if a.Triggered != 2 {
				t.Errorf("triggered %d GitRepos, want 2 (by-https, by-ssh)", a.Triggered)
			}
			for _, n := range []string{"by-https", "by-ssh"} {
				if triggers.count(ns, n) == 0 {
					t.Errorf("GitRepo %s was not triggered", n)
				}
				st := gitRepoStatus(t, ns, n)
				if st.WebhookCommit != webhooktest.CommitA || st.LastWebhookTime.IsZero() {
					t.Errorf("GitRepo %s: status webhookCommit %q lastWebhookTime %v, want %s and a time", n, st.WebhookCommit, st.LastWebhookTime, webhooktest.CommitA)
				}
			}
			for _, n := range []string{"other-branch", "other-repo", "no-secret"} {
				if c := triggers.count(ns, n); c != 0 {
					t.Errorf("GitRepo %s was triggered %d times, want never", n, c)
				}
				if st := gitRepoStatus(t, ns, n); st.WebhookCommit != "" || !st.LastWebhookTime.IsZero() {
					t.Errorf("GitRepo %s: status records a webhook (%q, %v), want none", n, st.WebhookCommit, st.LastWebhookTime)
				}
			}
			for _, r := range reads.inNamespace(ns) {
				if r != ns+"/hook" {
					t.Errorf("the receiver read Secret %s: only the repository's GitRepos' webhook Secret %s/hook may be read", r, ns)
				}
			}

			// An authentic push to a branch no GitRepo follows: 200,
			// nothing triggered.
			before := triggers.count(ns, "other-branch") + triggers.count(ns, "by-https")
			code, a2, raw := post(t, webhooktest.Fixture(provider, https, "refs/heads/feature", webhooktest.CommitB).Signed("s3cr3t-"+provider))
			if code != http.StatusOK || a2.Triggered != 0 {
				t.Errorf("a push to an unfollowed branch answered %d %s, want 200 and nothing triggered", code, raw)
			}
			if after := triggers.count(ns, "other-branch") + triggers.count(ns, "by-https"); after != before {
				t.Errorf("a push to an unfollowed branch triggered GitRepos")
			}
		})
	}
	if logs := suite.Logs.String(); strings.Contains(logs, "s3cr3t") {
		t.Errorf("a webhook secret reached the log")
	}
}

// TestWebhook_EachGitRepoVerifiesWithItsOwnSecret: two GitRepos of one
// repository and branch with different webhook Secrets; a payload signed
// with one's secret triggers that one only, and a GitRepo whose Secret
// does not exist is never triggered.
func TestWebhook_EachGitRepoVerifiesWithItsOwnSecret(t *testing.T) {
	ns := testenv.Namespace(t, env.Upstream.Client, "webhook-two-")
	repo := "https://github.example.com/shared/" + ns
	newSecret(t, ns, "hook-a", "secret-of-a")
	newSecret(t, ns, "hook-b", "secret-of-b")
	newGitRepo(t, ns, "a", repo, "main", "hook-a")
	newGitRepo(t, ns, "b", repo+".git", "main", "hook-b")
	newGitRepo(t, ns, "missing", repo, "main", "no-such-secret")
	for _, n := range []string{"a", "b", "missing"} {
		waitIndexed(t, ns, n)
	}
	push := webhooktest.Fixture(payload.GitHub, repo, "refs/heads/main", webhooktest.CommitA)
	if a := postUntil(t, push.Signed("secret-of-a"), http.StatusAccepted); a.Triggered != 1 {
		t.Errorf("signed for a: triggered %d, want 1", a.Triggered)
	}
	if triggers.count(ns, "a") != 1 || triggers.count(ns, "b") != 0 {
		t.Errorf("signed for a: triggers a=%d b=%d, want 1 and 0", triggers.count(ns, "a"), triggers.count(ns, "b"))
	}
	if a := postUntil(t, webhooktest.Fixture(payload.GitHub, repo, "refs/heads/main", webhooktest.CommitB).Signed("secret-of-b"), http.StatusAccepted); a.Triggered != 1 {
		t.Errorf("signed for b: triggered %d, want 1", a.Triggered)
	}
	if triggers.count(ns, "a") != 1 || triggers.count(ns, "b") != 1 {
		t.Errorf("signed for b: triggers a=%d b=%d, want 1 and 1", triggers.count(ns, "a"), triggers.count(ns, "b"))
	}
	if st := gitRepoStatus(t, ns, "a"); st.WebhookCommit != webhooktest.CommitA {
		t.Errorf("GitRepo a's webhookCommit is %q, want %s (b's payload must not touch it)", st.WebhookCommit, webhooktest.CommitA)
	}
	if triggers.count(ns, "missing") != 0 {
		t.Errorf("a GitRepo whose webhook Secret does not exist was triggered")
	}
}

// TestWebhook_TriggersOfOneGitRepoAreCoalesced: a burst of pushes (a
// replayed payload, or many commits) triggers a GitRepo at once and then
// once more at the end of the interval, not once per request; a replay
// of the same commit writes its status once.
func TestWebhook_TriggersOfOneGitRepoAreCoalesced(t *testing.T) {
	ns := testenv.Namespace(t, env.Upstream.Client, "webhook-burst-")
	repo := "https://gitlab.example.com/team/" + ns
	newSecret(t, ns, "hook", "burst-secret")
	newGitRepo(t, ns, "app", repo, "main", "hook")
	waitIndexed(t, ns, "app")
	push := webhooktest.Fixture(payload.GitLab, repo, "refs/heads/main", webhooktest.CommitA).Signed("burst-secret")
	postUntil(t, push, http.StatusAccepted)
	const burst = 10
	start := time.Now()
	for range burst {
		if code, _, raw := post(t, push); code != http.StatusAccepted {
			t.Fatalf("answered %d %s, want 202", code, raw)
		}
	}
	// One trigger at once, then at most one per interval the burst lasted,
	// plus the one at its end.
	most := 2 + int(time.Since(start)/DefaultMinInterval)
	testenv.Eventually(t, 10*time.Second, "the delayed trigger", func() error {
		if n := triggers.count(ns, "app"); n < 2 {
			return fmt.Errorf("%d triggers", n)
		}
		return nil
	})
	testenv.Consistently(t, 2*DefaultMinInterval, "no more triggers", func() error {
		if n := triggers.count(ns, "app"); n > most || n > burst/2 {
			return fmt.Errorf("%d triggers for %d requests, want at most %d (one at once, one per interval)", n, burst+1, most)
		}
		return nil
	})
}

// TestWebhook_RefusesWhatIsNotAWebhook: a GET (405), a body over 1 MiB
// (413), a request of no known provider or a payload that is not JSON
// (400): each with a JSON answer and nothing triggered.
func TestWebhook_RefusesWhatIsNotAWebhook(t *testing.T) {
	get, err := http.Get(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	get.Body.Close()
	if get.StatusCode != http.StatusMethodNotAllowed || get.Header.Get("Allow") != http.MethodPost {
		t.Errorf("GET answered %d (Allow %q), want 405 with Allow: POST", get.StatusCode, get.Header.Get("Allow"))
	}
	push := webhooktest.Fixture(payload.GitHub, "https://github.example.com/team/app", "refs/heads/main", webhooktest.CommitA)
	large := push
	large.Body = append(bytes.Repeat([]byte(" "), DefaultMaxBodyBytes), push.Body...)
	for _, c := range []struct {
		what string
		hk   webhooktest.Hook
		code int
	}{
		{"a body over 1 MiB", large.Signed("x"), http.StatusRequestEntityTooLarge},
		{"no provider's headers", webhooktest.Hook{Provider: "none", Header: http.Header{"Content-Type": {"application/json"}}, Body: push.Body}, http.StatusBadRequest},
		{"a body that is not JSON", webhooktest.Hook{Provider: payload.GitHub, Header: push.Header, Body: []byte("ref=main")}.Signed("x"), http.StatusBadRequest},
		{"a push without repository", webhooktest.Hook{Provider: payload.GitHub, Header: push.Header, Body: []byte(`{"ref":"refs/heads/main"}`)}.Signed("x"), http.StatusBadRequest},
	} {
		if code, a, raw := post(t, c.hk); code != c.code || a.Triggered != 0 || a.Message == "" {
			t.Errorf("%s: answered %d %s, want %d with a message", c.what, code, raw, c.code)
		}
	}
	// A ping is answered without anything being triggered or read.
	ping := webhooktest.Hook{Provider: payload.GitHub, Header: http.Header{"X-GitHub-Event": {"ping"}}, Body: []byte(`{"zen":"Keep it logically awesome.","hook_id":1}`)}
	if code, a, raw := post(t, ping); code != http.StatusOK || a.Triggered != 0 {
		t.Errorf("a ping answered %d %s, want 200", code, raw)
	}
}

// TestWebhook_TagPushTriggersGitRepoPinnedToTheTag: a GitRepo whose
// revision is a tag follows that tag; one pinned to a commit is never
// triggered (a push cannot change it).
func TestWebhook_TagPushTriggersGitRepoPinnedToTheTag(t *testing.T) {
	ns := testenv.Namespace(t, env.Upstream.Client, "webhook-tag-")
	repo := "https://gitlab.example.com/team/" + ns
	newSecret(t, ns, "hook", "tag-secret")
	for name, rev := range map[string]string{"tag": "v1.2.0", "other-tag": "v1.1.0", "commit": webhooktest.CommitB} {
		g := &fleet.GitRepo{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: fleet.GitRepoSpec{Repo: repo, Revision: rev, WebhookSecret: "hook"}}
		if err := env.Upstream.Client.Create(t.Context(), g); err != nil {
			t.Fatal(err)
		}
		waitIndexed(t, ns, name)
	}
	a := postUntil(t, webhooktest.Fixture(payload.GitLab, repo, "refs/tags/v1.2.0", webhooktest.CommitA).Signed("tag-secret"), http.StatusAccepted)
	if a.Triggered != 1 || triggers.count(ns, "tag") != 1 {
		t.Errorf("triggered %d (tag: %d), want the GitRepo on tag v1.2.0 only", a.Triggered, triggers.count(ns, "tag"))
	}
	for _, n := range []string{"other-tag", "commit"} {
		if triggers.count(ns, n) != 0 {
			t.Errorf("GitRepo %s was triggered by a push of tag v1.2.0", n)
		}
	}
}

// TestWebhook_AnswersNameNoGitRepo: neither a refused nor an accepted
// answer names a GitRepo or its namespace.
func TestWebhook_AnswersNameNoGitRepo(t *testing.T) {
	ns := testenv.Namespace(t, env.Upstream.Client, "webhook-leak-")
	repo := "https://github.example.com/team/" + ns
	newSecret(t, ns, "hook", "leak-secret")
	newGitRepo(t, ns, "secret-project-name", repo, "main", "hook")
	waitIndexed(t, ns, "secret-project-name")
	push := webhooktest.Fixture(payload.GitHub, repo, "refs/heads/main", webhooktest.CommitA)
	postUntil(t, push.Signed("leak-secret"), http.StatusAccepted)
	for _, hk := range []webhooktest.Hook{push, push.Signed("guess"), push.Signed("leak-secret")} {
		_, _, raw := post(t, hk)
		if strings.Contains(raw, "secret-project-name") || strings.Contains(raw, ns) {
			t.Errorf("an answer names the GitRepo: %s", raw)
		}
	}
}

// TestWebhook_ReadsABoundedNumberOfSecrets: one request reads at most
// MaxSecretReads webhook Secrets, each once however many GitRepos name it;
// a GitRepo past the bound is not verified (401 when it alone would have).
func TestWebhook_ReadsABoundedNumberOfSecrets(t *testing.T) {
	ns := testenv.Namespace(t, env.Upstream.Client, "webhook-bound-")
	repo := "https://github.example.com/team/" + ns
	for _, n := range []string{"a", "b", "c"} {
		newSecret(t, ns, "hook-"+n, "secret-"+n)
		// Two GitRepos per Secret: one read for both.
		newGitRepo(t, ns, n+"-1", repo, "main", "hook-"+n)
		newGitRepo(t, ns, n+"-2", repo, "main", "hook-"+n)
		waitIndexed(t, ns, n+"-1")
		waitIndexed(t, ns, n+"-2")
	}
	rc, err := New(Options{Client: cached, APIReader: &recordingReader{Reader: env.Upstream.Client, log: reads},
		Trigger: triggers.trigger, MaxSecretReads: 2})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	send := func(secret string) (int, Answer) {
		hk := webhooktest.Fixture(payload.GitHub, repo, "refs/heads/main", webhooktest.CommitA).Signed(secret)
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL, bytes.NewReader(hk.Body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header = hk.Header
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var a Answer
		_ = json.NewDecoder(resp.Body).Decode(&a)
		return resp.StatusCode, a
	}
	before := len(reads.inNamespace(ns))
	if code, a := send("secret-c"); code != http.StatusUnauthorized {
		t.Errorf("signed for the third Secret with a bound of two: %d %+v, want 401", code, a)
	}
	if n := len(reads.inNamespace(ns)) - before; n != 2 {
		t.Errorf("the request read %d Secrets, want 2 (the bound)", n)
	}
	if code, a := send("secret-a"); code != http.StatusAccepted || a.Triggered != 2 {
		t.Errorf("signed for the first Secret: %d %+v, want 202 and its two GitRepos", code, a)
	}
}
