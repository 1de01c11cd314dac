package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestUpHelp_NamesTheValues: the value of --bin-dir and --images is a DIR
// and a FILE in the help, not the words of the make target.
func TestUpHelp_NamesTheValues(t *testing.T) {
	root := newRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"up", "--help"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--bin-dir DIR ", "--images FILE ", "make dev-bins builds them"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("up --help lacks %q:\n%s", want, out.String())
		}
	}
}

// TestFleetBinary_IsTheProductBinaryNotTheHarness: what the harness runs
// as controller, proxy and `fleet kubeconfig` is the product binary, named
// by FLEET_BINARY or found beside fleet-dev, never fleet-dev itself.
func TestFleetBinary_IsTheProductBinaryNotTheHarness(t *testing.T) {
	t.Setenv("FLEET_BINARY", "some/dir/fleet")
	got, err := fleetBinary()
	if err != nil || !strings.HasSuffix(got, "/some/dir/fleet") {
		t.Errorf("FLEET_BINARY: got %q, %v", got, err)
	}
	t.Setenv("FLEET_BINARY", "")
	// The test binary has no `fleet` beside it: a clear error.
	if got, err := fleetBinary(); err == nil || !strings.Contains(err.Error(), "make build") {
		t.Errorf("no fleet beside the harness: got %q, %v; want an error naming make build", got, err)
	}
}
