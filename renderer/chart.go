// Package renderer is the project's one renderer: a Helm chart with values,
// optionally followed by a kustomize overlay, becomes objects in a stable
// order and the multi-document YAML that `helm template` prints. It never
// talks to a cluster, and the same input always gives the same bytes.
//
// The agent values builder (AgentValues) lives here too: the controller, the
// CLI and the tests all build charts/fleet-agent values through it.
package renderer

import (
	"fmt"
	"io/fs"
	"path"
	"sync"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
)

// Chart is a parsed Helm chart. Parse once, render many times.
type Chart struct {
	chart *chart.Chart
	// mu serialises renders: Helm's install action rewrites the chart's
	// dependency list while it renders.
	mu sync.Mutex
}

// Name returns the chart's name.
func (c *Chart) Name() string { return c.chart.Name() }

// LoadChartDir parses the chart in a directory.
func LoadChartDir(dir string) (*Chart, error) {
	ch, err := loader.LoadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("loading chart %s: %w", dir, err)
	}
	return &Chart{chart: ch}, nil
}

// LoadChartFS parses the chart at root within fsys (an embedded chart, or a
// Bundle's files).
func LoadChartFS(fsys fs.FS, root string) (*Chart, error) {
	var files []*loader.BufferedFile
	err := fs.WalkDir(fsys, root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		rel := p
		if root != "." {
			rel = p[len(root)+1:]
		}
		files = append(files, &loader.BufferedFile{Name: path.Clean(rel), Data: data})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading chart %s: %w", root, err)
	}
	ch, err := loader.LoadFiles(files)
	if err != nil {
		return nil, fmt.Errorf("loading chart %s: %w", root, err)
	}
	return &Chart{chart: ch}, nil
}
