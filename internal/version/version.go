// Package version reports what this binary is: the fleet release and the
// commit it was built from. `make build` and `make images` set both with
// -ldflags -X (Version from charts/fleet's appVersion unless VERSION=...);
// a plain `go build` falls back to what the Go toolchain stamps from git.
package version

import (
	"runtime"
	"runtime/debug"
)

// Version is the fleet release, e.g. 0.1.0. Set with
// -ldflags "-X github.com/gitops-fleet/fleet/internal/version.Version=0.1.0";
// unset, it is the module version Go stamped (a pseudo-version for a
// build from a git checkout), else "dev".
var Version = ""

// Commit is the git commit the binary was built from, with "-dirty" when
// the work tree had changes. Set with -ldflags -X like Version; unset, it
// is the vcs.revision Go stamped, else "unknown".
var Commit = ""

func init() {
	bi, ok := debug.ReadBuildInfo()
	Version, Commit = resolve(Version, Commit, bi, ok)
}

// resolve fills what -ldflags left empty from the build info.
func resolve(version, commit string, bi *debug.BuildInfo, ok bool) (string, string) {
	if version == "" && ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		version = bi.Main.Version
	}
	if version == "" {
		version = "dev"
	}
	if commit == "" && ok {
		var rev string
		var dirty bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if rev != "" {
			commit = rev
			if dirty {
				commit += "-dirty"
			}
		}
	}
	if commit == "" {
		commit = "unknown"
	}
	return version, commit
}

// Info is what `fleet version` prints.
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// Get returns this binary's Info.
func Get() Info {
	return Info{Version: Version, Commit: Commit, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
}

// KeysAndValues is Info as logr key/value pairs, for each component's first log line.
func KeysAndValues() []any {
	i := Get()
	return []any{"version", i.Version, "commit", i.Commit, "goVersion", i.GoVersion, "platform", i.Platform}
}
