// Package version reports the build's version, set with -ldflags at release.
package version

// Version is the fleet release; "dev" for local builds.
var Version = "dev"
