package renderertest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// HelmCLI is a pinned helm command-line binary of the repository's bin/.
type HelmCLI struct {
	// Name is "helm4" or "helm3", for subtest names.
	Name string
	// Path is the absolute path of the binary.
	Path string
	// Version is what `helm version` says it is (checked).
	Version string
}

// Command is the CLI with args, its cache, config and data directories in
// a fresh temporary directory (no user repositories or plugins).
func (h HelmCLI) Command(tb testing.TB, args ...string) *exec.Cmd {
	dir := tb.TempDir()
	cmd := exec.Command(h.Path, args...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+dir, "HELM_CONFIG_HOME="+dir, "HELM_DATA_HOME="+dir)
	return cmd
}

var (
	cliOnce sync.Once
	clis    []HelmCLI
	cliErr  error
)

// HelmCLIs returns the two helm CLIs users review with: bin/helm, Helm 4 at
// the version of the renderer's Helm SDK (go.mod), and
// bin/helm3, Helm 3 at the version hack/tools/go.mod pins. Both come from
// $FLEET_BIN_DIR, else bin/ at the repository root, never from PATH (a helm
// there would silently be tested instead), and each must say it is the
// pinned version. It fails the test when either is missing or another
// version: `make helm` builds both.
func HelmCLIs(tb testing.TB) []HelmCLI {
	tb.Helper()
	cliOnce.Do(func() { clis, cliErr = findHelmCLIs() })
	if cliErr != nil {
		tb.Fatalf("%v: run `make helm` (or `make test`, which builds it)", cliErr)
	}
	return clis
}

func findHelmCLIs() ([]HelmCLI, error) {
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	bin := os.Getenv("FLEET_BIN_DIR")
	if bin == "" {
		bin = filepath.Join(root, "bin")
	}
	// bin/helm is built from the main module, at the Helm SDK's version.
	v4, err := requiredVersion(filepath.Join(root, "go.mod"), "helm.sh/helm/v4")
	if err != nil {
		return nil, err
	}
	v3, err := requiredVersion(filepath.Join(root, "hack", "tools", "go.mod"), "helm.sh/helm/v3")
	if err != nil {
		return nil, err
	}
	out := []HelmCLI{{Name: "helm4", Path: filepath.Join(bin, "helm"), Version: v4}, {Name: "helm3", Path: filepath.Join(bin, "helm3"), Version: v3}}
	for _, h := range out {
		got, err := exec.Command(h.Path, "version", "--template", "{{.Version}}").Output()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", h.Path, err)
		}
		if strings.TrimSpace(string(got)) != h.Version {
			return nil, fmt.Errorf("%s is helm %s, want %s", h.Path, strings.TrimSpace(string(got)), h.Version)
		}
	}
	return out, nil
}

// requiredVersion is the version of module the go.mod file requires.
func requiredVersion(gomod, module string) (string, error) {
	b, err := os.ReadFile(gomod)
	if err != nil {
		return "", err
	}
	m := regexp.MustCompile(`(?m)^\s*(?:require\s+)?` + regexp.QuoteMeta(module) + ` (v\S+)`).FindSubmatch(b)
	if m == nil {
		return "", fmt.Errorf("%s requires no %s", gomod, module)
	}
	return string(m[1]), nil
}

// repoRoot is the nearest directory above the working directory with the
// project's go.mod.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.HasPrefix(string(b), "module github.com/gitops-fleet/fleet\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no github.com/gitops-fleet/fleet go.mod above the working directory")
		}
		dir = parent
	}
}
