package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/controlplane"
	"github.com/gitops-fleet/fleet/dev/gitserver"
	"github.com/gitops-fleet/fleet/gitops/bundlereader"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/scheme"
)

// The gitops group measures the source component (`fleet gitops`, a process
// of its own) against a real git server (dev/gitserver, HTTPS with basic
// auth) and a real upstream control plane; no controller runs, so every
// Bundle write the bench sees is the source component's.
const (
	gitopsNamespace = "fleet-default"
	gitopsRepo      = "mono.git"
)

type gitopsHarness struct {
	env    *controlplane.Env
	dir    string
	git    *gitserver.Server
	proc   *exec.Cmd
	log    string
	client client.WithWatch
}

func runGitOps(ctx context.Context, opts Options, step func(string, ...any)) ([]Result, error) {
	paths, gitrepos, interval, window := 1000, 500, 5*time.Second, 30*time.Second
	if opts.Quick {
		paths, gitrepos, window = 50, 20, 10*time.Second
	}
	step("gitops: an upstream control plane, a git server and fleet gitops")
	h, err := startGitopsHarness(ctx, opts.FleetBinary)
	if err != nil {
		return nil, err
	}
	defer h.stop()
	var results []Result

	// A monorepo of `paths` Bundle directories, one GitRepo on it.
	files := map[string][]byte{}
	for i := range paths {
		dir := fmt.Sprintf("apps/app-%04d", i)
		files[dir+"/fleet.yaml"] = fmt.Appendf(nil, "defaultNamespace: app-%04d\n", i)
		files[dir+"/cm.yaml"] = fmt.Appendf(nil, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  version: \"1\"\n")
	}
	if err := h.git.CreateRepo(gitopsRepo, "main"); err != nil {
		return nil, err
	}
	first, err := h.git.Commit(gitopsRepo, files, "apps")
	if err != nil {
		return nil, err
	}
	step("gitops-monorepo: a GitRepo of %d paths", paths)
	start := time.Now()
	if err := h.createGitRepo(ctx, "mono", []string{"apps/*"}, interval); err != nil {
		return nil, err
	}
	if err := h.waitBundles(ctx, "mono", paths, first, 10*time.Minute); err != nil {
		return results, fmt.Errorf("gitops-monorepo: %w (fleet gitops log: %s)", err, h.log)
	}
	rss, cpu := processUsage(h.proc.Process.Pid)
	initial := Result{Name: "gitops-monorepo-first-sync", Count: paths, WallS: f(time.Since(start).Seconds()),
		ControllerPeakRSSMB: f(rss), ControllerCPUS: f(cpu),
		Notes: fmt.Sprintf("GitRepo created → %d Bundles written and status.commit set; fleet gitops' peak RSS and CPU so far (git bytes served %d, git requests %d)",
			paths, h.git.UploadPackBytes.Load(), h.git.RequestsFor(gitopsRepo))}
	results = append(results, initial)

	// One commit touching one path: its Bundle alone is written again.
	step("gitops-monorepo: a commit touching one path of %d", paths)
	target := fmt.Sprintf("apps/app-%04d", paths/2)
	name := bundlereader.BundleName("mono", target)
	// The watch starts at the list's resourceVersion: events are writes
	// after it, not the existing Bundles.
	existing := &fleet.BundleList{}
	if err := h.client.List(ctx, existing, client.InNamespace(gitopsNamespace)); err != nil {
		return results, err
	}
	w, err := h.client.Watch(ctx, &fleet.BundleList{}, client.InNamespace(gitopsNamespace), client.MatchingLabels{fleet.RepoLabel: "mono"},
		&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: existing.ResourceVersion}})
	if err != nil {
		return results, err
	}
	bytesBefore, reqBefore := h.git.UploadPackBytes.Load(), h.git.RequestsFor(gitopsRepo)
	start = time.Now()
	second, err := h.git.Commit(gitopsRepo, map[string][]byte{target + "/cm.yaml": []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  version: \"2\"\n")}, "one path")
	if err != nil {
		w.Stop()
		return results, err
	}
	var took time.Duration
	writes := 0
	// Count every Bundle write until the target was written and two polling
	// intervals more have passed (a write of another Bundle would come in
	// the same pass).
	deadline := time.After(5 * time.Minute)
	var settle <-chan time.Time
loop:
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				break loop
			}
			if ev.Type != watch.Added && ev.Type != watch.Modified {
				continue
			}
			b, _ := ev.Object.(*fleet.Bundle)
			if b == nil {
				continue
			}
			writes++
			if b.Name == name && b.Labels[fleet.CommitLabel] == second && took == 0 {
				took = time.Since(start)
				settle = time.After(2 * interval)
			}
		case <-settle:
			break loop
		case <-deadline:
			w.Stop()
			return results, fmt.Errorf("gitops-monorepo: Bundle %s not written for commit %s within 5m (fleet gitops log: %s)", name, second, h.log)
		}
	}
	w.Stop()
	rss, cpu = processUsage(h.proc.Process.Pid)
	one := Result{Name: "gitops-monorepo-one-path", Count: 1, WallS: f(took.Seconds()), ControllerPeakRSSMB: f(rss), ControllerCPUS: f(cpu),
		Goal: "Bundle writes = 1",
		Notes: fmt.Sprintf("commit → its Bundle written (polling every %s: up to one interval is waiting); Bundle writes %d; git bytes fetched %d; git requests %d",
			interval, writes, h.git.UploadPackBytes.Load()-bytesBefore, h.git.RequestsFor(gitopsRepo)-reqBefore)}
	results = append(results, one)

	// Many GitRepos on one repository: one ls-remote per polling round.
	step("gitops-shared-repo: %d GitRepos on one repository, polling every %s", gitrepos, interval)
	for i := range gitrepos {
		if err := h.createGitRepo(ctx, fmt.Sprintf("shared-%04d", i), []string{fmt.Sprintf("apps/app-%04d", i%paths)}, interval); err != nil {
			return results, err
		}
	}
	if err := h.waitSynced(ctx, "shared-", gitrepos, second, 10*time.Minute); err != nil {
		return results, fmt.Errorf("gitops-shared-repo: %w (fleet gitops log: %s)", err, h.log)
	}
	lsBefore := h.git.InfoRefs.Load()
	fetchBefore := h.git.UploadPacks.Load()
	time.Sleep(window)
	ls := h.git.InfoRefs.Load() - lsBefore
	rounds := window.Seconds() / interval.Seconds()
	rss, cpu = processUsage(h.proc.Process.Pid)
	shared := Result{Name: "gitops-shared-repo", Count: gitrepos + 1, ControllerPeakRSSMB: f(rss), ControllerCPUS: f(cpu),
		ThroughputPerS: f(float64(ls) / window.Seconds()),
		Goal:           "one ls-remote per repository and ref per polling interval",
		Notes: fmt.Sprintf("%d GitRepos (+ the monorepo's) on one repository and branch, polling every %s: %d ls-remotes in %s = %.1f per interval; %d fetches (no new commit)",
			gitrepos, interval, ls, window, float64(ls)/rounds, h.git.UploadPacks.Load()-fetchBefore)}
	results = append(results, shared)
	return results, nil
}

func startGitopsHarness(ctx context.Context, fleetBin string) (*gitopsHarness, error) {
	env, err := controlplane.Start(ctx, controlplane.Options{})
	if err != nil {
		return nil, err
	}
	h := &gitopsHarness{env: env}
	if h.dir, err = os.MkdirTemp("", "fleet-bench-gitops-"); err != nil {
		h.stop()
		return nil, err
	}
	if h.client, err = client.NewWithWatch(env.Upstream.Config, client.Options{Scheme: scheme.Scheme}); err != nil {
		h.stop()
		return nil, err
	}
	c := env.Upstream.Clientset
	for _, ns := range []string{config.DefaultSystemNamespace, gitopsNamespace} {
		if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			h.stop()
			return nil, err
		}
	}
	if h.git, err = gitserver.Start(gitserver.Options{Dir: filepath.Join(h.dir, "git")}); err != nil {
		h.stop()
		return nil, err
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: gitopsNamespace, Name: "git-auth"}, Type: corev1.SecretTypeBasicAuth,
		Data: map[string][]byte{corev1.BasicAuthUsernameKey: []byte(h.git.Username), corev1.BasicAuthPasswordKey: []byte(h.git.Password)}}
	if _, err := c.CoreV1().Secrets(gitopsNamespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		h.stop()
		return nil, err
	}
	kc := filepath.Join(h.dir, "upstream.kubeconfig")
	if err := os.WriteFile(kc, env.Upstream.Kubeconfig, 0o600); err != nil {
		h.stop()
		return nil, err
	}
	metrics, err := freeAddress()
	if err != nil {
		h.stop()
		return nil, err
	}
	h.log = filepath.Join(h.dir, "gitops.log")
	logf, err := os.Create(h.log)
	if err != nil {
		h.stop()
		return nil, err
	}
	h.proc = exec.Command(fleetBin, "gitops", "--kubeconfig", kc, "--namespace", config.DefaultSystemNamespace,
		"--cache-dir", filepath.Join(h.dir, "cache"), "--metrics-bind-address", metrics, "--health-probe-bind-address", "0",
		"--leader-elect=false", "--webhook-listen", "")
	h.proc.Stdout, h.proc.Stderr = logf, logf
	if err := h.proc.Start(); err != nil {
		h.stop()
		return nil, fmt.Errorf("starting fleet gitops (%s): %w", fleetBin, err)
	}
	return h, nil
}

func (h *gitopsHarness) createGitRepo(ctx context.Context, name string, paths []string, interval time.Duration) error {
	repo := &fleet.GitRepo{ObjectMeta: metav1.ObjectMeta{Namespace: gitopsNamespace, Name: name}, Spec: fleet.GitRepoSpec{
		Repo: h.git.HTTPURL("127.0.0.1", gitopsRepo), Branch: "main", Paths: paths,
		ClientSecretName: "git-auth", CABundle: h.git.CA,
		PollingInterval: &metav1.Duration{Duration: interval},
	}}
	return h.client.Create(ctx, repo)
}

// waitBundles waits until GitRepo name has n Bundles and its status says
// commit.
func (h *gitopsHarness) waitBundles(ctx context.Context, name string, n int, commit string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		list := &fleet.BundleList{}
		repo := &fleet.GitRepo{}
		err := h.client.List(ctx, list, client.InNamespace(gitopsNamespace), client.MatchingLabels{fleet.RepoLabel: name})
		if err == nil {
			err = h.client.Get(ctx, client.ObjectKey{Namespace: gitopsNamespace, Name: name}, repo)
		}
		if err == nil && len(list.Items) == n && repo.Status.Commit == commit {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("GitRepo %s: %d of %d Bundles, status.commit %q (want %s) after %s", name, len(list.Items), n, repo.Status.Commit, commit, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// waitSynced waits until the n GitRepos named prefix… say commit.
func (h *gitopsHarness) waitSynced(ctx context.Context, prefix string, n int, commit string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		list := &fleet.GitRepoList{}
		if err := h.client.List(ctx, list, client.InNamespace(gitopsNamespace)); err != nil {
			return err
		}
		synced := 0
		for _, r := range list.Items {
			if len(r.Name) > len(prefix) && r.Name[:len(prefix)] == prefix && r.Status.Commit == commit {
				synced++
			}
		}
		if synced == n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d GitRepos at commit %s after %s", synced, n, commit, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (h *gitopsHarness) stop() {
	if h.proc != nil && h.proc.Process != nil {
		_ = h.proc.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = h.proc.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = h.proc.Process.Kill()
		}
	}
	if h.git != nil {
		h.git.Stop()
	}
	if h.env != nil {
		_ = h.env.Stop()
	}
	if h.dir != "" {
		_ = os.RemoveAll(h.dir)
	}
}
