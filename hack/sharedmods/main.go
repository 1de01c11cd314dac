// Command sharedmods checks that the packages compiled both by the main
// module (its test packages, bin/fleet, bin/fleet-dev, bin/helm) and by
// hack/tools (the Kubernetes binaries, etcd, controller-gen, bin/helm3) come
// from the same module versions, so that the two builds share their
// compiled packages in the build cache. A package is compiled once for both
// only when its module and every module below it are at one version (and the
// flags are the same: CGO_ENABLED=0, no -trimpath); one module at two
// versions makes everything above it compile twice, minutes on a fresh
// machine. `make verify` runs it; run it from the repository's root.
//
// Usage:
//
//	go run ./hack/sharedmods         # fail, saying what to raise, when a shared module differs
//	go run ./hack/sharedmods -list   # print the packages both builds compile
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/mod/semver"
)

// mainRoots are what the main module compiles in make test: every package
// with its tests (hack/unit.sh, the e2e suite) and the binaries.
var mainRoots = []string{"./...", "helm.sh/helm/v4/cmd/helm"}

// toolsDir is the tools module, relative to the repository's root.
const toolsDir = "hack/tools"

// pkg is one package of a build list and the module version it comes from.
type pkg struct {
	importPath string
	module     string // path of the module that provides it
	version    string // the version compiled: a replacement's version, "path@version" or directory
}

func main() {
	list := flag.Bool("list", false, "print the packages both builds compile, one a line, and exit")
	flag.Parse()
	if err := run(*list); err != nil {
		fmt.Fprintln(os.Stderr, "sharedmods:", err)
		os.Exit(1)
	}
}

func run(list bool) error {
	if _, err := os.Stat(filepath.Join(toolsDir, "go.mod")); err != nil {
		return fmt.Errorf("run it from the repository's root (no %s/go.mod here): %w", toolsDir, err)
	}
	toolRoots, err := toolPackages()
	if err != nil {
		return err
	}
	mainPkgs, err := goListDeps(".", append([]string{"-test"}, mainRoots...))
	if err != nil {
		return fmt.Errorf("main module: %w", err)
	}
	toolPkgs, err := goListDeps(toolsDir, toolRoots)
	if err != nil {
		return fmt.Errorf("%s: %w", toolsDir, err)
	}
	shared, mismatches := compare(mainPkgs, toolPkgs)
	if list {
		fmt.Println(strings.Join(shared, "\n"))
		return nil
	}
	if len(mismatches) > 0 {
		return fmt.Errorf("%d modules that both the main module and %s compile are at different versions, "+
			"so their packages and everything above them compile twice (minutes on a fresh machine); "+
			"raise the older requirement to the newer (never lower a product dependency), then run `go mod tidy` in that module:\n%s",
			len(mismatches), toolsDir, strings.Join(mismatches, "\n"))
	}
	fmt.Printf("sharedmods: the main module and %s compile %d packages alike (all at one version)\n", toolsDir, len(shared))
	return nil
}

// toolPackages asks hack/build-tools.sh which packages it builds, so the
// two never disagree.
func toolPackages() ([]string, error) {
	out, err := exec.Command("hack/build-tools.sh", "--print-packages").Output()
	if err != nil {
		return nil, fmt.Errorf("hack/build-tools.sh --print-packages: %w", exitDetail(err))
	}
	pkgs := strings.Fields(string(out))
	if len(pkgs) == 0 {
		return nil, fmt.Errorf("hack/build-tools.sh --print-packages printed no package")
	}
	return pkgs, nil
}

// goListDeps lists the packages args and their dependencies as the builds
// compile them (CGO_ENABLED=0), leaving out the standard library, the
// module's own packages and test variants.
func goListDeps(dir string, args []string) ([]pkg, error) {
	const format = `{{if and .Module (not .Module.Main) (not .ForTest)}}` +
		`{{.ImportPath}} {{.Module.Path}} {{.Module.Version}}{{with .Module.Replace}} {{.Path}} {{.Version}}{{end}}{{end}}`
	cmd := exec.Command("go", append([]string{"list", "-deps", "-f", format}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod")
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -deps %s: %w", strings.Join(args, " "), exitDetail(err))
	}
	return parseList(string(out)), nil
}

// parseList reads goListDeps's lines: the package, its module's path and
// version, then the replacement's path and version when replaced.
func parseList(out string) []pkg {
	var pkgs []pkg
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		p := pkg{importPath: f[0], module: f[1]}
		switch len(f) {
		case 3: // required
			p.version = f[2]
		case 4: // replaced by a directory
			p.version = f[3]
		case 5: // replaced by a module: by itself at another version, or by another module
			p.version = f[4]
			if f[3] != f[1] {
				p.version = f[3] + "@" + f[4]
			}
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// compare returns the import paths both lists hold and, for each module
// whose packages both compile at different versions, a line saying which
// versions and what to run.
func compare(mainPkgs, toolPkgs []pkg) (shared, mismatches []string) {
	inMain := map[string]pkg{}
	for _, p := range mainPkgs {
		inMain[p.importPath] = p
	}
	type versions struct{ main, tools string }
	differ := map[string]versions{}
	for _, t := range toolPkgs {
		m, ok := inMain[t.importPath]
		if !ok {
			continue
		}
		shared = append(shared, t.importPath)
		if m.version != t.version {
			differ[t.module] = versions{m.version, t.version}
		}
	}
	slices.Sort(shared)
	shared = slices.Compact(shared)
	for mod, v := range differ {
		var fix string
		switch mainV, toolsV := bare(v.main), bare(v.tools); {
		case semver.IsValid(mainV) && semver.IsValid(toolsV) && semver.Compare(mainV, toolsV) > 0:
			fix = fmt.Sprintf("raise %s: cd %s && go get %s@%s && go mod tidy", toolsDir, toolsDir, mod, mainV)
		case semver.IsValid(mainV) && semver.IsValid(toolsV):
			fix = fmt.Sprintf("raise the main module: go get %s@%s && go mod tidy", mod, toolsV)
		default:
			fix = "make both modules require (or replace it with) one version"
		}
		mismatches = append(mismatches, fmt.Sprintf("  %s: main module %s, %s %s; %s", mod, v.main, toolsDir, v.tools, fix))
	}
	slices.Sort(mismatches)
	return shared, mismatches
}

// bare is the version of "path@version" (a replacement) or of "version".
func bare(v string) string {
	if i := strings.LastIndex(v, "@"); i >= 0 {
		return v[i+1:]
	}
	return v
}

// exitDetail adds a failed command's standard error to its error.
func exitDetail(err error) error {
	if ee, ok := err.(*exec.ExitError); ok && len(bytes.TrimSpace(ee.Stderr)) > 0 {
		return fmt.Errorf("%w: %s", err, bytes.TrimSpace(ee.Stderr))
	}
	return err
}
