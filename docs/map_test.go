package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// TestArchitecture_EveryPackageOnceWithItsJob: docs/architecture.md's
// "Packages" table is the map of the code. Every Go package of the
// repository (test-only packages included: they are rooms too) is the
// first cell of exactly one row, and every row names a package or folder
// that exists, so the map cannot drift from the code in either direction.
func TestArchitecture_EveryPackageOnceWithItsJob(t *testing.T) {
	root := repoRoot(t)
	rows := tableFirstCells(t, filepath.Join(root, "docs", "architecture.md"), "## Packages")
	seen := map[string]int{}
	for _, paths := range rows {
		for _, p := range paths {
			seen[p]++
			if _, err := os.Stat(filepath.Join(root, p)); err != nil {
				t.Errorf("docs/architecture.md Packages: %q does not exist", p)
			}
		}
	}
	for _, pkg := range goPackages(t, root) {
		switch n := seen[pkg]; {
		case n == 0:
			t.Errorf("docs/architecture.md Packages: package %s has no row; add one with its one job", pkg)
		case n > 1:
			t.Errorf("docs/architecture.md Packages: package %s has %d rows; one package, one job", pkg, n)
		}
	}
}

// TestReadmeLayout_NamesEveryTopLevelFolder: the README's layout table names
// every top-level folder of the repository (as the folder or a path in it).
func TestReadmeLayout_NamesEveryTopLevelFolder(t *testing.T) {
	root := repoRoot(t)
	rows := tableFirstCells(t, filepath.Join(root, "README.md"), "## Layout")
	named := map[string]bool{}
	for _, paths := range rows {
		for _, p := range paths {
			named[strings.SplitN(strings.TrimSuffix(p, "/"), "/", 2)[0]] = true
			if _, err := os.Stat(filepath.Join(root, p)); err != nil {
				t.Errorf("README.md Layout: %q does not exist", p)
			}
		}
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") || e.Name() == "bin" {
			continue
		}
		if !tracked(root, e.Name()) {
			continue
		}
		if !named[e.Name()] {
			t.Errorf("README.md Layout: the folder %s/ is not in the table", e.Name())
		}
	}
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// tracked reports whether dir holds a file of the repository (not only
// build output or a developer's scratch files): one that git would list,
// approximated by any file outside ignored build folders.
func tracked(root, dir string) bool {
	found := false
	_ = filepath.WalkDir(filepath.Join(root, dir), func(p string, d fs.DirEntry, err error) error {
		if err != nil || found {
			return fs.SkipAll
		}
		if !d.IsDir() {
			found = true
		}
		return nil
	})
	return found
}

var backticked = regexp.MustCompile("`([^`]+)`")

// tableFirstCells returns, for each row of the first table after heading,
// the backticked paths of its first cell.
func tableFirstCells(t *testing.T, file, heading string) [][]string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	i := 0
	for i < len(lines) && strings.TrimSpace(lines[i]) != heading {
		i++
	}
	if i == len(lines) {
		t.Fatalf("%s: no heading %q", file, heading)
	}
	for i < len(lines) && !strings.HasPrefix(lines[i], "|") {
		i++
	}
	var rows [][]string
	for i += 2; i < len(lines) && strings.HasPrefix(lines[i], "|"); i++ {
		cells := strings.Split(lines[i], "|")
		if len(cells) < 3 {
			continue
		}
		var paths []string
		for _, m := range backticked.FindAllStringSubmatch(cells[1], -1) {
			paths = append(paths, strings.TrimSuffix(m[1], "/"))
		}
		rows = append(rows, paths)
	}
	if len(rows) == 0 {
		t.Fatalf("%s: no table after %q", file, heading)
	}
	return rows
}

// goPackages lists the directories of the repository that hold a Go
// package (relative, slash-separated), skipping build output, hidden
// folders and testdata.
func goPackages(t *testing.T, root string) []string {
	t.Helper()
	var pkgs []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if p != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bin" || name == "node_modules") {
			return filepath.SkipDir
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			return nil
		}
		// A folder with Go files is a package (a nested module such as
		// hack/tools, a test-only package, files behind build tags too).
		if goFiles, _ := filepath.Glob(filepath.Join(p, "*.go")); len(goFiles) > 0 {
			pkgs = append(pkgs, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(pkgs)
	return pkgs
}
