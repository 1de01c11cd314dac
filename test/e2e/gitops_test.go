package e2e

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/devenv"
	"github.com/gitops-fleet/fleet/dev/gitserver"
	"github.com/gitops-fleet/fleet/gitops/decrypt/sopstest"
	"github.com/gitops-fleet/fleet/internal/endpoints"
)

// The GitOps tests: fleet-gitops, installed by the chart with the
// controller, reads a real git server on this machine (dev/gitserver:
// HTTPS with basic auth and its own CA, SSH with a key and known_hosts),
// which the upstream's pods reach at the dev environment's host address.

const gitopsNS = "e2e-gitops-apps"

// startGitServer serves a repository directory to the dev clusters' pods
// until the test ends.
func startGitServer(t *testing.T) (*gitserver.Server, string) {
	t.Helper()
	// gitkit logs every request with the standard logger; the suite uses
	// it for nothing else.
	log.SetOutput(io.Discard)
	host := env.State.HostAddress()
	srv, err := gitserver.Start(gitserver.Options{Dir: tempDir(t), Hosts: []string{host}})
	must(t, err)
	t.Cleanup(srv.Stop)
	for _, port := range []int{srv.HTTPPort(), srv.SSHPort()} {
		must(t, env.State.ExposeHost(port))
		t.Cleanup(func() { _ = env.State.Unexpose(port) })
	}
	return srv, host
}

// configMapYAML is a path's manifest: ConfigMap name holding v.
func configMapYAML(name, v string) []byte {
	return []byte(fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\ndata:\n  v: %q\n", name, v))
}

func gitRepo(ns, name, url string, paths []string, mutate func(*fleet.GitRepo)) *fleet.GitRepo {
	g := &fleet.GitRepo{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: fleet.GitRepoSpec{Repo: url, Branch: "main", Paths: paths,
			PollingInterval: &metav1.Duration{Duration: 3 * time.Second}},
	}
	if mutate != nil {
		mutate(g)
	}
	return g
}

// createGitRepo creates g and deletes it when the test ends (its Bundles
// and what they deployed go with it).
func createGitRepo(t *testing.T, g client.Object) {
	t.Helper()
	must(t, up.Create(t.Context(), g))
	t.Cleanup(func() { _ = up.Delete(context.Background(), g) })
}

func bundle(t *testing.T, ns, name string) (*fleet.Bundle, error) {
	b := &fleet.Bundle{}
	return b, up.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, b)
}

// configMapValue is data.v of a ConfigMap of a downstream cluster, or the
// error getting it.
func configMapValue(t *testing.T, dev, ns, name string) (string, error) {
	cm, err := clientset(t, dev).CoreV1().ConfigMaps(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	return cm.Data["v"], nil
}

func gitRepoCondition(t *testing.T, ns, name, condType string) (*metav1.Condition, *fleet.GitRepo, error) {
	g := &fleet.GitRepo{}
	if err := up.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, g); err != nil {
		return nil, nil, err
	}
	c := meta.FindStatusCondition(g.Status.Conditions, condType)
	if c == nil {
		return nil, g, fmt.Errorf("GitRepo %s/%s has no %s condition yet: %+v", ns, name, condType, g.Status.Conditions)
	}
	return c, g, nil
}

// testGitOps: a GitRepo over HTTPS deploys its paths' Bundles to dev-2; one
// over SSH too; a commit changing one path rewrites only its Bundle; a bad
// fleet.yaml in a path leaves the others deployed and names path and
// field; a removed path is pruned with what it deployed; a repository
// GitRepoRestriction refuses is never fetched.
func testGitOps(t *testing.T, dev2Name string) {
	group := t // GitRepos made in a subtest live until the group ends
	srv, host := startGitServer(t)
	const repo = "e2e-apps.git"
	must(t, srv.CreateRepo(repo, "main"))
	first, err := srv.Commit(repo, map[string][]byte{
		"one/fleet.yaml": []byte("defaultNamespace: " + gitopsNS + "\n"),
		"one/cm.yaml":    configMapYAML("one", "1"),
		"two/fleet.yaml": []byte("defaultNamespace: " + gitopsNS + "\n"),
		"two/cm.yaml":    configMapYAML("two", "1"),
		"ssh/fleet.yaml": []byte("defaultNamespace: " + gitopsNS + "\n"),
		"ssh/cm.yaml":    configMapYAML("over-ssh", "1"),
	}, "two paths, and one for SSH")
	must(t, err)
	targets := []fleet.GitTarget{{ClusterName: dev2Name}}

	https := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "e2e-git-https"}, Type: corev1.SecretTypeBasicAuth,
		Data: map[string][]byte{"username": []byte(srv.Username), "password": []byte(srv.Password)}}
	ssh := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "e2e-git-ssh"}, Type: corev1.SecretTypeSSHAuth,
		Data: map[string][]byte{"ssh-privatekey": srv.ClientKey, "known_hosts": srv.KnownHosts(host)}}
	for _, s := range []*corev1.Secret{https, ssh} {
		must(t, up.Create(t.Context(), s))
		t.Cleanup(func() { _ = up.Delete(context.Background(), s) })
	}

	t.Run("a GitRepo over HTTPS with basic auth deploys its paths", func(t *testing.T) {
		start := time.Now()
		createGitRepo(group, gitRepo(ws, "e2e-https", srv.HTTPURL(host, repo), []string{"one", "two"}, func(g *fleet.GitRepo) {
			g.Spec.ClientSecretName, g.Spec.CABundle, g.Spec.Targets = https.Name, srv.CA, targets
		}))
		for _, name := range []string{"e2e-https-one", "e2e-https-two"} {
			if err := devenv.BundleReady(t.Context(), up, ws, name, 1, 3*time.Minute); err != nil {
				c, g, _ := gitRepoCondition(t, ws, "e2e-https", "Ready")
				t.Fatalf("%v\nGitRepo Ready: %+v\nstatus: %+v\n%s", err, c, g, devenv.PodReport(t.Context(), cluster("upstream"), agentNS))
			}
			b, _ := bundle(t, ws, name)
			if b.Labels[fleet.RepoLabel] != "e2e-https" || b.Labels[fleet.CommitLabel] != first || !ownedByGitRepo(b, "e2e-https") {
				t.Errorf("Bundle %s: labels %v, owners %+v; want repo-name e2e-https, commit %s, controlled by the GitRepo", name, b.Labels, b.OwnerReferences, first)
			}
		}
		for _, name := range []string{"one", "two"} {
			if v, err := configMapValue(t, "dev-2", gitopsNS, name); err != nil || v != "1" {
				t.Errorf("dev-2: ConfigMap %s/%s: %q, %v", gitopsNS, name, v, err)
			}
		}
		must(t, devenv.Poll(t.Context(), time.Minute, func() error {
			c, g, err := gitRepoCondition(t, ws, "e2e-https", "Ready")
			if err != nil {
				return err
			}
			if c.Status != metav1.ConditionTrue || g.Status.Commit != first {
				return fmt.Errorf("GitRepo Ready %s %s: %s, commit %q", c.Status, c.Reason, c.Message, g.Status.Commit)
			}
			return nil
		}))
		t.Logf("deployed from git in %.1fs", time.Since(start).Seconds())
	})

	t.Run("a GitRepo over SSH with a key and known_hosts deploys its path", func(t *testing.T) {
		createGitRepo(group, gitRepo(ws, "e2e-ssh", srv.SSHURL(host, repo), []string{"ssh"}, func(g *fleet.GitRepo) {
			g.Spec.ClientSecretName, g.Spec.Targets = ssh.Name, targets
		}))
		if err := devenv.BundleReady(t.Context(), up, ws, "e2e-ssh-ssh", 1, 3*time.Minute); err != nil {
			c, _, _ := gitRepoCondition(t, ws, "e2e-ssh", "Ready")
			t.Fatalf("%v\nGitRepo Ready: %+v", err, c)
		}
		if v, err := configMapValue(t, "dev-2", gitopsNS, "over-ssh"); err != nil || v != "1" {
			t.Errorf("dev-2: ConfigMap over-ssh: %q, %v", v, err)
		}
	})

	t.Run("a commit changing one path rewrites only that path's Bundle", func(t *testing.T) {
		one, err := bundle(t, ws, "e2e-https-one")
		must(t, err)
		second, err := srv.Commit(repo, map[string][]byte{"two/cm.yaml": configMapYAML("two", "2")}, "two: v 2")
		must(t, err)
		start := time.Now()
		must(t, devenv.Poll(t.Context(), 2*time.Minute, func() error {
			if v, err := configMapValue(t, "dev-2", gitopsNS, "two"); err != nil || v != "2" {
				return fmt.Errorf("dev-2: ConfigMap two holds %q (%v), want 2", v, err)
			}
			return nil
		}))
		t.Logf("the commit reached dev-2 in %.1fs", time.Since(start).Seconds())
		two, err := bundle(t, ws, "e2e-https-two")
		must(t, err)
		if two.Labels[fleet.CommitLabel] != second {
			t.Errorf("Bundle two: commit label %q, want %s", two.Labels[fleet.CommitLabel], second)
		}
		must(t, devenv.Poll(t.Context(), time.Minute, func() error {
			g := &fleet.GitRepo{}
			if err := up.Get(t.Context(), client.ObjectKey{Namespace: ws, Name: "e2e-https"}, g); err != nil {
				return err
			}
			if g.Status.Commit != second {
				return fmt.Errorf("GitRepo commit %q, want %s", g.Status.Commit, second)
			}
			return nil
		}))
		now, err := bundle(t, ws, "e2e-https-one")
		must(t, err)
		if now.Generation != one.Generation || now.Labels[fleet.CommitLabel] != one.Labels[fleet.CommitLabel] {
			t.Errorf("Bundle one was rewritten by a commit that did not touch it: generation %d -> %d, commit label %s -> %s",
				one.Generation, now.Generation, one.Labels[fleet.CommitLabel], now.Labels[fleet.CommitLabel])
		}
	})

	t.Run("a bad fleet.yaml in one path: the other stays deployed, the GitRepo names path and field", func(t *testing.T) {
		_, err := srv.Commit(repo, map[string][]byte{
			"two/fleet.yaml": []byte("defaultNamespace:\n  not: a string\n"),
			"one/cm.yaml":    configMapYAML("one", "3"),
		}, "two: a broken fleet.yaml; one: v 3")
		must(t, err)
		must(t, devenv.Poll(t.Context(), 2*time.Minute, func() error {
			c, _, err := gitRepoCondition(t, ws, "e2e-https", "Ready")
			if err != nil {
				return err
			}
			if c.Status == metav1.ConditionTrue || !strings.Contains(c.Message, "two") || !strings.Contains(c.Message, "defaultNamespace") {
				return fmt.Errorf("GitRepo Ready %s %s: %q; want False naming path two and field defaultNamespace", c.Status, c.Reason, c.Message)
			}
			return nil
		}))
		// The good path's change still lands; the bad path's Bundle and
		// ConfigMap stay as they were.
		must(t, devenv.Poll(t.Context(), 2*time.Minute, func() error {
			if v, err := configMapValue(t, "dev-2", gitopsNS, "one"); err != nil || v != "3" {
				return fmt.Errorf("dev-2: ConfigMap one holds %q (%v), want 3", v, err)
			}
			return nil
		}))
		if _, err := bundle(t, ws, "e2e-https-two"); err != nil {
			t.Errorf("Bundle two after its fleet.yaml broke: %v; want it kept", err)
		}
		if v, err := configMapValue(t, "dev-2", gitopsNS, "two"); err != nil || v != "2" {
			t.Errorf("dev-2: ConfigMap two: %q, %v; want the last good 2", v, err)
		}
	})

	t.Run("a removed path is pruned after a complete scan: its Bundle and its objects downstream go", func(t *testing.T) {
		_, err := srv.Commit(repo, map[string][]byte{"two": nil}, "two removed")
		must(t, err)
		// The GitRepo still names path two: the scan is incomplete, the
		// GitRepo says which path, and nothing is pruned.
		must(t, devenv.Poll(t.Context(), 2*time.Minute, func() error {
			c, _, err := gitRepoCondition(t, ws, "e2e-https", "Ready")
			if err != nil {
				return err
			}
			if c.Status == metav1.ConditionTrue || !strings.Contains(c.Message, "two") || !strings.Contains(c.Message, "matches no directory") {
				return fmt.Errorf("GitRepo Ready %s %s: %q; want False naming path two", c.Status, c.Reason, c.Message)
			}
			return nil
		}))
		if _, err := bundle(t, ws, "e2e-https-two"); err != nil {
			t.Errorf("Bundle two after an incomplete scan: %v; want it kept", err)
		}
		// The path leaves the GitRepo: the next scan is complete.
		g := &fleet.GitRepo{}
		must(t, up.Get(t.Context(), client.ObjectKey{Namespace: ws, Name: "e2e-https"}, g))
		patch := client.MergeFrom(g.DeepCopy())
		g.Spec.Paths = []string{"one"}
		must(t, up.Patch(t.Context(), g, patch))
		must(t, devenv.Poll(t.Context(), 2*time.Minute, func() error {
			if _, err := bundle(t, ws, "e2e-https-two"); !apierrors.IsNotFound(err) {
				return fmt.Errorf("Bundle two still there (%v)", err)
			}
			if _, err := configMapValue(t, "dev-2", gitopsNS, "two"); !apierrors.IsNotFound(err) {
				return fmt.Errorf("dev-2: ConfigMap two still there (%v)", err)
			}
			return nil
		}))
		if _, err := bundle(t, ws, "e2e-https-one"); err != nil {
			t.Errorf("Bundle one: %v", err)
		}
		must(t, devenv.Poll(t.Context(), time.Minute, func() error {
			c, _, err := gitRepoCondition(t, ws, "e2e-https", "Ready")
			if err != nil {
				return err
			}
			if c.Status != metav1.ConditionTrue {
				return fmt.Errorf("GitRepo Ready %s %s: %s", c.Status, c.Reason, c.Message)
			}
			return nil
		}))
	})

	t.Run("a signed GitHub push to Service fleet-gitops-webhook syncs a GitRepo that does not poll within 2s", func(t *testing.T) {
		testWebhook(t, srv, host, repo, targets)
	})

	t.Run("a repository GitRepoRestriction refuses: Accepted=False with its reason, never fetched", func(t *testing.T) {
		const ns, refusedRepo = "e2e-gitops-restricted", "refused.git"
		must(t, srv.CreateRepo(refusedRepo, "main"))
		_, err := srv.Commit(refusedRepo, map[string][]byte{"one/cm.yaml": configMapYAML("refused", "1")}, "never read")
		must(t, err)
		namespace := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
		must(t, client.IgnoreAlreadyExists(up.Create(t.Context(), namespace)))
		t.Cleanup(func() { _ = up.Delete(context.Background(), namespace) })
		r := &fleet.GitRepoRestriction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "only-example"},
			AllowedRepoPatterns: []string{`https://git\.example\.com/.*`}}
		must(t, up.Create(t.Context(), r))
		createGitRepo(t, gitRepo(ns, "refused", srv.HTTPURL(host, refusedRepo), []string{"one"}, nil))
		must(t, devenv.Poll(t.Context(), time.Minute, func() error {
			c, _, err := gitRepoCondition(t, ns, "refused", fleet.GitRepoAcceptedCondition)
			if err != nil {
				return err
			}
			if c.Status != metav1.ConditionFalse || c.Reason != fleet.RestrictionRefusedReason || !strings.Contains(c.Message, "allowedRepoPatterns") {
				return fmt.Errorf("Accepted %s %s: %q; want False RestrictionRefused naming allowedRepoPatterns", c.Status, c.Reason, c.Message)
			}
			return nil
		}))
		quiet()
		if n := srv.RequestsFor(refusedRepo); n != 0 {
			t.Errorf("the refused repository got %d requests, want none", n)
		}
		bundles := &fleet.BundleList{}
		must(t, up.List(t.Context(), bundles, client.InNamespace(ns)))
		if len(bundles.Items) != 0 {
			t.Errorf("%d Bundles in %s, want none", len(bundles.Items), ns)
		}
	})
}

func ownedByGitRepo(b *fleet.Bundle, name string) bool {
	for _, o := range b.OwnerReferences {
		if o.Kind == "GitRepo" && o.Name == name && o.Controller != nil && *o.Controller {
			return true
		}
	}
	return false
}

// testRegisterFromGit is the design card's first use with the product
// alone, as make demo runs it (the same devenv.GitopsRepo): examples/gitops
// published on a real git server with dev-1's kubeconfig encrypted with
// SOPS (mac_only_encrypted, as the example's README says), read by a
// GitRepo in fleet-local; the local cluster's agent applies the Cluster and
// the decrypted Secret upstream and the controller pushes dev-1's agent. No
// Bundle holds the kubeconfig. Then a commit bumping redeployAgentGeneration
// (one line in clear) rolls exactly one agent pod. It runs once dev-1's
// earlier Cluster is deleted; the GitRepo stays for the uninstall, which
// deletes GitRepos first (its fleet.yaml keeps what it applied:
// keepResources).
func testRegisterFromGit(t *testing.T) {
	srv, host := startGitServer(t)
	kc, err := cluster("dev-1").PortableKubeconfig()
	must(t, err)
	id := sopstest.NewIdentity(t)
	g := &devenv.GitopsRepo{Server: srv, Host: host, Name: "e2e-fleet-clusters", Recipient: id.Recipient().String(), Identity: id.String()}
	_, err = g.Publish(filepath.Join(env.RepoDir, "examples", "gitops"), map[string][]byte{"dev-1-kubeconfig": kc})
	must(t, err)
	for _, o := range g.Objects(3 * time.Second) {
		must(t, up.Create(t.Context(), o))
	}

	start := time.Now()
	if _, err := devenv.ClusterReady(t.Context(), up, ws, "dev-1", 4*time.Minute); err != nil {
		c, _, _ := gitRepoCondition(t, devenv.GitopsNamespace, g.Name, "Ready")
		t.Fatalf("%v\nGitRepo Ready: %+v", err, c)
	}
	cs := clientset(t, "dev-1")
	before := runningAgent(t, cs, 2*time.Minute)
	t.Logf("dev-1 registered from git in %.1fs", time.Since(start).Seconds())
	must(t, devenv.Poll(t.Context(), 3*time.Minute, func() error {
		c, _, err := gitRepoCondition(t, devenv.GitopsNamespace, g.Name, "Ready")
		if err != nil || c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("GitRepo %s/%s not Ready: %+v (%v)", devenv.GitopsNamespace, g.Name, c, err)
		}
		return nil
	}))
	bundles := &fleet.BundleList{}
	must(t, up.List(t.Context(), bundles, client.InNamespace(devenv.GitopsNamespace), client.MatchingLabels{fleet.RepoLabel: g.Name}))
	if len(bundles.Items) != 1 {
		t.Errorf("%d Bundles from the repository, want 1 (its root)", len(bundles.Items))
	}
	for _, b := range bundles.Items {
		for _, r := range b.Spec.Resources {
			if leaksKubeconfig(r.Content) {
				t.Errorf("Bundle %s holds the decrypted kubeconfig in %s", b.Name, r.Name)
			}
		}
	}

	pods := trackPods(t, cs, agentNS, agentPods)
	gen, _, err := g.BumpRedeploy("clusters/dev-1.yaml")
	must(t, err)
	expectOneRollout(t, cs, pods, before, gen)
}

// leaksKubeconfig says whether s holds a kubeconfig's fields or PEM (also
// base64-encoded, as kubeconfigs carry it) in clear.
func leaksKubeconfig(s string) bool {
	// (Not "-----BEGIN": SOPS keeps the age-encrypted data key armored.)
	for _, clear := range []string{"certificate-authority-data", "client-key-data", "BEGIN CERTIFICATE", "PRIVATE KEY", "LS0tLS1CRUdJTi"} {
		if strings.Contains(s, clear) {
			return true
		}
	}
	return false
}

// testWebhook: a GitRepo with disablePolling reads its repository only when
// asked. A push payload signed with its webhookSecret (GitHub's
// X-Hub-Signature-256, Fleet's Secret key "github"), POSTed to the
// endpoints of Service fleet-gitops-webhook, makes it read the new commit:
// its Bundle carries the commit within 2 s, and the status records the
// webhook. A payload with a wrong signature is refused (401) and triggers
// nothing.
func testWebhook(t *testing.T, srv *gitserver.Server, host, repo string, targets []fleet.GitTarget) {
	_, err := srv.Commit(repo, map[string][]byte{
		"hook/fleet.yaml": []byte("defaultNamespace: " + gitopsNS + "\n"),
		"hook/cm.yaml":    configMapYAML("hooked", "1"),
	}, "hook: v 1")
	must(t, err)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "e2e-webhook"},
		Data: map[string][]byte{"github": []byte("e2e-webhook-secret")}}
	must(t, up.Create(t.Context(), secret))
	t.Cleanup(func() { _ = up.Delete(context.Background(), secret) })
	url := srv.HTTPURL(host, repo)
	createGitRepo(t, gitRepo(ws, "e2e-webhook", url, []string{"hook"}, func(g *fleet.GitRepo) {
		g.Spec.ClientSecretName, g.Spec.CABundle, g.Spec.Targets = "e2e-git-https", srv.CA, targets
		g.Spec.DisablePolling, g.Spec.WebhookSecret, g.Spec.PollingInterval = true, secret.Name, nil
	}))
	// The first read comes from the new generation.
	if err := devenv.BundleReady(t.Context(), up, ws, "e2e-webhook-hook", 1, 3*time.Minute); err != nil {
		c, _, _ := gitRepoCondition(t, ws, "e2e-webhook", "Ready")
		t.Fatalf("%v\nGitRepo Ready: %+v", err, c)
	}

	commit, err := srv.Commit(repo, map[string][]byte{"hook/cm.yaml": configMapYAML("hooked", "2")}, "hook: v 2")
	must(t, err)
	quiet() // no polling: nothing reads the commit
	if b, err := bundle(t, ws, "e2e-webhook-hook"); err != nil || b.Labels[fleet.CommitLabel] == commit {
		t.Fatalf("the GitRepo read the repository without a webhook (disablePolling): %v", err)
	}

	payload := []byte(fmt.Sprintf(`{"ref":"refs/heads/main","before":"%s","after":"%s","repository":{"name":"e2e-apps","full_name":"e2e/e2e-apps","clone_url":"%s","html_url":"%s","ssh_url":"%s"}}`,
		strings.Repeat("0", 40), commit, url, strings.TrimSuffix(url, ".git"), srv.SSHURL(host, repo)))
	endpoint := webhookEndpoint(t)
	post := func(key string) *http.Response {
		mac := hmac.New(sha256.New, []byte(key))
		mac.Write(payload)
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+endpoint+"/", bytes.NewReader(payload))
		must(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-GitHub-Event", "push")
		req.Header.Set("X-GitHub-Delivery", "e2e-1")
		req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
		resp, err := http.DefaultClient.Do(req)
		must(t, err)
		_ = resp.Body.Close()
		return resp
	}
	if resp := post("not-the-secret"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a payload with a wrong signature: %s, want 401", resp.Status)
	}
	start := time.Now()
	if resp := post("e2e-webhook-secret"); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("a signed payload: %s, want 202", resp.Status)
	}
	must(t, devenv.Poll(t.Context(), 10*time.Second, func() error {
		b, err := bundle(t, ws, "e2e-webhook-hook")
		if err != nil {
			return err
		}
		if b.Labels[fleet.CommitLabel] != commit {
			return fmt.Errorf("Bundle e2e-webhook-hook at commit %q, want %s", b.Labels[fleet.CommitLabel], commit)
		}
		return nil
	}))
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("the webhook's commit reached the Bundle in %.1fs, want within 2s", took.Seconds())
	} else {
		t.Logf("the webhook's commit reached the Bundle in %.2fs", took.Seconds())
	}
	g := &fleet.GitRepo{}
	must(t, up.Get(t.Context(), client.ObjectKey{Namespace: ws, Name: "e2e-webhook"}, g))
	if g.Status.WebhookCommit != commit || g.Status.LastWebhookTime.IsZero() {
		t.Errorf("GitRepo status webhookCommit %q, lastWebhookTime %v; want %s and a time", g.Status.WebhookCommit, g.Status.LastWebhookTime, commit)
	}
	must(t, devenv.Poll(t.Context(), 2*time.Minute, func() error {
		if v, err := configMapValue(t, "dev-2", gitopsNS, "hooked"); err != nil || v != "2" {
			return fmt.Errorf("dev-2: ConfigMap hooked holds %q (%v), want 2", v, err)
		}
		return nil
	}))
}

// webhookEndpoint is a ready endpoint (pod IP:port) of Service
// fleet-gitops-webhook: the dev clusters run no service proxy, and the
// host reaches pod IPs through the cluster's bridge.
func webhookEndpoint(t *testing.T) string {
	t.Helper()
	var addr string
	must(t, devenv.Poll(t.Context(), time.Minute, func() error {
		slices, err := clientset(t, "upstream").DiscoveryV1().EndpointSlices(agentNS).List(t.Context(),
			metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=fleet-gitops-webhook"})
		if err != nil {
			return err
		}
		items := make([]*discoveryv1.EndpointSlice, len(slices.Items))
		for i := range slices.Items {
			items[i] = &slices.Items[i]
		}
		ready := endpoints.Ready(items, "webhook")
		if len(ready) == 0 {
			return fmt.Errorf("Service fleet-gitops-webhook has no ready endpoint yet")
		}
		addr = ready[0]
		return nil
	}))
	return addr
}
