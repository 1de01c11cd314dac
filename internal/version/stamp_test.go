package version_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/version"
)

// TestMakeBuild_StampsVersionAndCommit builds bin/fleet the way users and
// the images do (`make build`, into a temporary BIN) and asks it: `fleet
// version` gives charts/fleet's appVersion (what the image is tagged and
// the chart pulls), the checked-out commit (-dirty with changes), the
// embedded agent chart's version; `fleet --version` gives the same first
// line; the controller, agent, proxy and renderer log the same version and
// commit first. VERSION=... overrides the version (make -n: the same flags).
func TestMakeBuild_StampsVersionAndCommit(t *testing.T) {
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	git := func(args ...string) string {
		out, err := exec.Command("git", append([]string{"-C", repo}, args...)...).Output()
		if err != nil {
			t.Fatalf("git %v: %v", args, err)
		}
		return strings.TrimSpace(string(out))
	}
	commitNow := func() string {
		c := git("rev-parse", "HEAD")
		if git("status", "--porcelain") != "" {
			c += "-dirty"
		}
		return c
	}
	before := commitNow()
	make := exec.Command("make", "-C", repo, "build", "BIN="+bin)
	make.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := make.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	// Another package's test may touch the tree meanwhile: either state is right.
	after := commitNow()

	chart, err := os.ReadFile(filepath.Join(repo, "charts", "fleet", "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^appVersion: *"?([^"\s]+)"?`).FindSubmatch(chart)
	if m == nil {
		t.Fatal("charts/fleet/Chart.yaml has no appVersion")
	}
	appVersion := string(m[1])

	fleet := filepath.Join(bin, "fleet")
	out, err := exec.Command(fleet, "version", "-o", "json").Output()
	if err != nil {
		t.Fatalf("fleet version -o json: %v", err)
	}
	var got struct {
		version.Info
		AgentChart struct{ Name, Version, AppVersion string } `json:"agentChart"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("fleet version -o json is not JSON: %v\n%s", err, out)
	}
	if got.Version != appVersion || (got.Commit != before && got.Commit != after) || !strings.HasPrefix(got.GoVersion, "go") || got.Platform == "" {
		t.Errorf("fleet version: %+v; want version %s (charts/fleet appVersion), commit %s", got.Info, appVersion, before)
	}
	commit := got.Commit
	if got.AgentChart.Name != "fleet-agent" || got.AgentChart.Version == "" {
		t.Errorf("fleet version: agent chart %+v", got.AgentChart)
	}

	text, err := exec.Command(fleet, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	short, err := exec.Command(fleet, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	first := strings.SplitN(string(text), "\n", 2)[0]
	if want := "fleet " + appVersion + " (commit " + commit + ","; !strings.HasPrefix(first, want) {
		t.Errorf("fleet version first line %q, want it to start %q", first, want)
	}
	if strings.TrimSpace(string(short)) != first {
		t.Errorf("fleet --version %q, fleet version's first line %q", short, first)
	}
	if !strings.Contains(string(text), "agent chart: fleet-agent "+got.AgentChart.Version) {
		t.Errorf("fleet version does not name the agent chart:\n%s", text)
	}

	// Each component's first log line names the same build. Without a
	// cluster or credentials each stops at once, after that line.
	for _, args := range [][]string{
		{"controller", "--kubeconfig", filepath.Join(bin, "missing.kubeconfig")},
		{"agent", "--kubeconfig", filepath.Join(bin, "missing.kubeconfig")},
		{"proxy", "--kubeconfig", filepath.Join(bin, "missing.kubeconfig")},
		{"renderer", "--credentials-dir", filepath.Join(bin, "missing"), "--listen", "127.0.0.1:0"},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		cmd := exec.CommandContext(ctx, fleet, args...)
		cmd.Env = append(os.Environ(), "KUBECONFIG=", "KUBERNETES_SERVICE_HOST=")
		out, _ := cmd.CombinedOutput()
		cancel()
		var line struct{ Msg, Version, Commit string }
		first, _, _ := strings.Cut(string(out), "\n")
		if err := json.Unmarshal([]byte(first), &line); err != nil || line.Msg != "starting fleet "+args[0] || line.Version != got.Version || line.Commit != got.Commit {
			t.Errorf("fleet %s: first log line %q; want msg %q with version %s and commit %s", args[0], first, "starting fleet "+args[0], got.Version, got.Commit)
		}
	}

	dry, err := exec.Command("make", "-C", repo, "-n", "build", "images", "VERSION=9.8.7-rc.1").CombinedOutput()
	if err != nil {
		t.Fatalf("make -n: %v\n%s", err, dry)
	}
	// bin/fleet, bin/fleet-dev and the image's binary all stamped, the image
	// tagged the same.
	for want, n := range map[string]int{"internal/version.Version=9.8.7-rc.1": 3, "internal/version.Commit=" + commit: 3, "--tag 9.8.7-rc.1": 1} {
		if got := strings.Count(string(dry), want); got != n {
			t.Errorf("make -n build images VERSION=9.8.7-rc.1: %q %d times, want %d:\n%s", want, got, n, dry)
		}
	}
}

// TestOneVersionEverywhere: both charts' appVersion (their default image
// tag, and `make images`' VERSION) and the controller's built-in agent
// image (used when the ConfigMap names none) are the same release.
func TestOneVersionEverywhere(t *testing.T) {
	appVersion := func(chart string) string {
		b, err := os.ReadFile(filepath.Join("..", "..", "charts", chart, "Chart.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`(?m)^appVersion: *"?([^"\s]+)"?`).FindSubmatch(b)
		if m == nil {
			t.Fatalf("charts/%s/Chart.yaml has no appVersion", chart)
		}
		return string(m[1])
	}
	fleet, agent := appVersion("fleet"), appVersion("fleet-agent")
	if fleet != agent {
		t.Errorf("charts/fleet appVersion %s, charts/fleet-agent appVersion %s: one release, one version", fleet, agent)
	}
	if want := "gitops-fleet/fleet:" + fleet; config.DefaultAgentImage != want {
		t.Errorf("config.DefaultAgentImage %s, want %s (charts/fleet appVersion)", config.DefaultAgentImage, want)
	}
}
