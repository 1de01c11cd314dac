// Package chartstest makes variants of the embedded charts for tests: the
// chart a controller upgrade could ship.
package chartstest

import (
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/gitops-fleet/fleet/charts"
)

// PatchedFleetAgent is the embedded agent chart with the first occurrence of
// old in file replaced by new; the test fails when file lacks old.
func PatchedFleetAgent(t testing.TB, file, old, new string) fs.FS {
	t.Helper()
	src := charts.FleetAgent()
	out := fstest.MapFS{}
	err := fs.WalkDir(src, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(src, p)
		if err != nil {
			return err
		}
		if p == file {
			if !strings.Contains(string(data), old) {
				t.Fatalf("%s does not contain %q", file, old)
			}
			data = []byte(strings.Replace(string(data), old, new, 1))
		}
		out[p] = &fstest.MapFile{Data: data}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
