// Package charts embeds the project's Helm charts so the controller and the
// CLI render exactly the chart in this repository.
package charts

import (
	"embed"
	"io/fs"
)

//go:embed all:fleet-agent
var files embed.FS

// FleetAgent is charts/fleet-agent.
func FleetAgent() fs.FS {
	sub, err := fs.Sub(files, "fleet-agent")
	if err != nil {
		panic(err) // the embed directive guarantees the directory
	}
	return sub
}
