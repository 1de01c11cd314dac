package main

import (
	"slices"
	"strings"
	"testing"
)

func TestCompare_NamesEachModuleAtTwoVersionsAndWhatToRaise(t *testing.T) {
	mainPkgs := []pkg{
		{"golang.org/x/net/http2", "golang.org/x/net", "v0.62.0"},
		{"golang.org/x/net/idna", "golang.org/x/net", "v0.62.0"},
		{"k8s.io/api/core/v1", "k8s.io/api", "v0.37.2"},
		{"github.com/onsi/gomega", "github.com/onsi/gomega", "v1.43.0"},
		{"sigs.k8s.io/yaml", "sigs.k8s.io/yaml", "v1.6.0"},
	}
	toolPkgs := []pkg{
		{"golang.org/x/net/http2", "golang.org/x/net", "v0.59.0"},
		{"golang.org/x/net/idna", "golang.org/x/net", "v0.59.0"},
		{"k8s.io/api/core/v1", "k8s.io/api", "v0.37.2"}, // replaced by itself at v0.37.2, as hack/tools does
		{"github.com/onsi/gomega", "github.com/onsi/gomega", "v1.44.0"},
		{"k8s.io/kubernetes/pkg/kubelet", "k8s.io/kubernetes", "v1.37.2"}, // only the tools build
	}
	shared, mismatches := compare(mainPkgs, toolPkgs)

	if want := []string{"github.com/onsi/gomega", "golang.org/x/net/http2", "golang.org/x/net/idna", "k8s.io/api/core/v1"}; !slices.Equal(shared, want) {
		t.Errorf("shared packages = %q, want %q", shared, want)
	}
	if len(mismatches) != 2 {
		t.Fatalf("want one line for gomega and one for x/net (k8s.io/api is the same), got %q", mismatches)
	}
	gomega, xnet := mismatches[0], mismatches[1]
	for _, want := range []string{"github.com/onsi/gomega", "v1.43.0", "v1.44.0", "raise the main module: go get github.com/onsi/gomega@v1.44.0"} {
		if !strings.Contains(gomega, want) {
			t.Errorf("gomega line %q does not say %q", gomega, want)
		}
	}
	for _, want := range []string{"golang.org/x/net", "v0.62.0", "v0.59.0", "cd hack/tools && go get golang.org/x/net@v0.62.0 && go mod tidy"} {
		if !strings.Contains(xnet, want) {
			t.Errorf("x/net line %q does not say %q", xnet, want)
		}
	}
}

func TestCompare_AlignedBuildsHaveNoMismatch(t *testing.T) {
	p := []pkg{{"golang.org/x/sys/unix", "golang.org/x/sys", "v0.49.0"}}
	if _, mismatches := compare(p, p); len(mismatches) != 0 {
		t.Errorf("mismatches = %q, want none", mismatches)
	}
}

func TestParseList_ComparesWhatIsCompiled(t *testing.T) {
	got := parseList("k8s.io/api/core/v1 k8s.io/api v0.36.0 k8s.io/api v0.37.2\n" +
		"golang.org/x/net/idna golang.org/x/net v0.62.0\n" +
		"example.com/fork/x example.com/x v1.0.0 example.com/fork v1.2.0\n" +
		"example.com/local/y example.com/local v1.0.0 ../local\n")
	want := []pkg{
		{"k8s.io/api/core/v1", "k8s.io/api", "v0.37.2"},
		{"golang.org/x/net/idna", "golang.org/x/net", "v0.62.0"},
		{"example.com/fork/x", "example.com/x", "example.com/fork@v1.2.0"},
		{"example.com/local/y", "example.com/local", "../local"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("parseList = %+v, want %+v", got, want)
	}
}
