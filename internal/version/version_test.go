package version

import (
	"runtime/debug"
	"testing"
)

// TestResolve: -ldflags wins; a plain `go build` reports what Go stamped
// from git (revision, -dirty for a modified tree, the module version unless
// it is "(devel)"); with nothing stamped the binary says dev/unknown rather
// than something that looks like a release.
func TestResolve(t *testing.T) {
	stamped := &debug.BuildInfo{
		Main: debug.Module{Version: "v0.0.0-20261204210000-a15a7cb12881+dirty"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "a15a7cb1288113aeb799fc1bfe141052e9a4c3f5"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	clean := &debug.BuildInfo{
		Main:     debug.Module{Version: "(devel)"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "false"}},
	}
	for _, tc := range []struct {
		name, version, commit string
		bi                    *debug.BuildInfo
		ok                    bool
		wantVersion, wantCmt  string
	}{
		{"ldflags win", "0.1.0", "deadbeef", stamped, true, "0.1.0", "deadbeef"},
		{"go build from a modified checkout", "", "", stamped, true, "v0.0.0-20261204210000-a15a7cb12881+dirty", "a15a7cb1288113aeb799fc1bfe141052e9a4c3f5-dirty"},
		{"go build from a clean checkout", "", "", clean, true, "dev", "abc"},
		{"version stamped, commit from git", "0.2.0", "", clean, true, "0.2.0", "abc"},
		{"nothing stamped", "", "", &debug.BuildInfo{}, true, "dev", "unknown"},
		{"no build info", "", "", nil, false, "dev", "unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, c := resolve(tc.version, tc.commit, tc.bi, tc.ok)
			if v != tc.wantVersion || c != tc.wantCmt {
				t.Errorf("resolve = %q, %q; want %q, %q", v, c, tc.wantVersion, tc.wantCmt)
			}
		})
	}
}
