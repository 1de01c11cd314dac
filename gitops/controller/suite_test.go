package controller_test

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fluxcd/pkg/gittestserver"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/controlplane"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/gitops/controller"
	"github.com/gitops-fleet/fleet/gitops/gitsource"
)

// The tests run the reconciler in a manager against a real API server
// (envtest) and a real git server in the process: fluxcd's gittestserver,
// which serves repositories with the git binaries over HTTP with basic auth.
// Commits are made with the git CLI.

var (
	suite *testenv.Suite
	c     client.Client
	rec   *controller.Reconciler
	cache *gitsource.Cache
)

// listTTL is long, so that two GitRepos of one repository share one
// ls-remote however loaded the machine is; new commits are brought by
// Trigger, which asks afresh.
const listTTL = time.Minute

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.Options{ControlPlanes: &controlplane.Options{NoControllerManager: true}, CaptureLogs: true}, func(s *testenv.Suite) error {
		suite = s
		c = s.Env.Upstream.Client
		dir, err := os.MkdirTemp("", "gitops-cache-")
		if err != nil {
			return err
		}
		cache, err = gitsource.New(gitsource.Options{Root: dir, ListTTL: listTTL, AllowHTTPCredentials: true, AllowInsecureSkipTLSVerify: true})
		if err != nil {
			return err
		}
		opts := controller.ManagerOptions("cattle-fleet-system")
		base := testenv.ManagerOptions(s.Context())
		opts.Metrics, opts.Controller, opts.BaseContext = base.Metrics, base.Controller, base.BaseContext
		mgr, err := ctrl.NewManager(s.Env.Upstream.Config, opts)
		if err != nil {
			return err
		}
		rec = controller.New(mgr.GetClient(), mgr.GetAPIReader(), controller.Options{Cache: cache, Concurrency: 4})
		if err := rec.SetupWithManager(mgr); err != nil {
			return err
		}
		s.Go("manager", mgr.Start)
		return nil
	})
}

// server is a git server with one repository and counters of the
// requests it served.
type server struct {
	t    testing.TB
	srv  *gittestserver.GitServer
	bare string
	work string

	infoRefs    atomic.Int64 // GET …/info/refs: an ls-remote, and the start of every fetch
	uploadPacks atomic.Int64 // POST …/git-upload-pack: fetches
}

const repoName = "repo.git"

func newServer(t testing.TB, user, password string) *server {
	t.Helper()
	s := &server{t: t, srv: gittestserver.NewGitServer(t.TempDir()), work: t.TempDir()}
	if user != "" {
		s.srv.Auth(user, password)
	}
	s.srv.AddHTTPMiddlewares(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch {
			case strings.HasSuffix(r.URL.Path, "/info/refs"):
				s.infoRefs.Add(1)
			case strings.HasSuffix(r.URL.Path, "/git-upload-pack"):
				s.uploadPacks.Add(1)
			}
			next.ServeHTTP(w, r)
		})
	})
	s.bare = filepath.Join(s.srv.Root(), repoName)
	runGit(t, s.srv.Root(), "init", "-q", "--bare", "-b", "main", repoName)
	runGit(t, s.work, "init", "-q", "-b", "main")
	if err := s.srv.StartHTTP(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.srv.StopHTTP)
	return s
}

func (s *server) url() string { return s.srv.HTTPAddress() + "/" + repoName }

// commit writes files (empty content removes the file or directory),
// commits and pushes to main; it returns the commit.
func (s *server) commit(files map[string]string) string {
	s.t.Helper()
	for name, content := range files {
		p := filepath.Join(s.work, name)
		if content == "" {
			if err := os.RemoveAll(p); err != nil {
				s.t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			s.t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			s.t.Fatal(err)
		}
	}
	runGit(s.t, s.work, "add", "-A")
	runGit(s.t, s.work, "commit", "-q", "--allow-empty", "-m", "change")
	runGit(s.t, s.work, "push", "-q", "-f", s.bare, "HEAD:refs/heads/main")
	return strings.TrimSpace(runGit(s.t, s.work, "rev-parse", "HEAD"))
}

func runGit(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=test", "-c", "user.email=test@example.com", "-c", "init.defaultBranch=main"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+dir, "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("git %s: %v: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.String()
}

// configMap is a manifest of one ConfigMap.
func configMap(name, value string) string {
	return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\ndata:\n  value: \"" + value + "\"\n"
}

// basicAuth makes a basic-auth client Secret in ns.
func basicAuth(t *testing.T, ns, name, user, password string) {
	t.Helper()
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Type:       corev1.SecretTypeBasicAuth,
		Data:       map[string][]byte{"username": []byte(user), "password": []byte(password)},
	}
	if err := c.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

// gitRepo creates a GitRepo on main polled once an hour (so anything
// sooner is a trigger's or a watch's doing).
func gitRepo(t *testing.T, ns, name, url string, mutate func(*fleet.GitRepo)) *fleet.GitRepo {
	t.Helper()
	g := &fleet.GitRepo{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: fleet.GitRepoSpec{
			Repo: url, Branch: "main",
			PollingInterval: &metav1.Duration{Duration: time.Hour},
		},
	}
	if mutate != nil {
		mutate(g)
	}
	if err := c.Create(context.Background(), g); err != nil {
		t.Fatal(err)
	}
	return g
}

func getRepo(t *testing.T, g *fleet.GitRepo) *fleet.GitRepo {
	t.Helper()
	out := &fleet.GitRepo{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(g), out); err != nil {
		t.Fatal(err)
	}
	return out
}

func key(g *fleet.GitRepo) types.NamespacedName {
	return types.NamespacedName{Namespace: g.Namespace, Name: g.Name}
}

// bundles returns the GitRepo's Bundles by name.
func bundles(t *testing.T, g *fleet.GitRepo) map[string]fleet.Bundle {
	t.Helper()
	list := &fleet.BundleList{}
	if err := c.List(context.Background(), list, client.InNamespace(g.Namespace), client.MatchingLabels{fleet.RepoLabel: g.Name}); err != nil {
		t.Fatal(err)
	}
	out := map[string]fleet.Bundle{}
	for _, b := range list.Items {
		out[b.Name] = b
	}
	return out
}

const timeout = 60 * time.Second
